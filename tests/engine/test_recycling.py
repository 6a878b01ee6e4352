"""Token Recycling (engine/recycling.py) on tiny models: greedy identity with transformers' generate()
in chain and tree mode, the matrix filled from the verifications and carried to the next prompt,
the breadth-first tree's shape, bad constructor values, and the two-token joint losslessness test
at temperature 1 with top-k and top-p on (failing on a broken rule)."""

import copy

import numpy as np
import pytest
import torch

from playground.config import CHAIN, TREE
from playground.engine import sampling
from playground.engine.drafters import Drafter
from playground.engine.events import output_tokens, summarize
from playground.engine.generate import SpecConfig, generate
from playground.engine.recycling import TokenRecyclingDrafter
from playground.engine.tree import ROOT, Tree
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import encode_prompt
from playground.models.tiny import tiny_pair

from test_engine import PROMPT, hf_greedy

TOKENS = 40


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def reference(pair):
    target, _, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    return ids, hf_greedy(target, ids, TOKENS)


def run(target, ids, drafter, runner="eager", **knobs):
    return list(generate(target, ids, SpecConfig(max_new_tokens=TOKENS, runner=runner, **knobs), drafter))


MODES = [dict(speculation=CHAIN), dict(speculation=TREE, budget=12, depth=4, branching=(4, 2, 1, 1)),
         dict(speculation=TREE, budget=20, depth=5, branching=2)]


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("mode", MODES, ids=["chain", "tree-4211", "tree-b2"])
def test_greedy_recycling_equals_transformers_generate(pair, reference, mode, runner):
    """Cold, then warm on the same prompt: both equal the target's own greedy output; the warm run
    drafts from the first run's logits and saves target calls."""
    target, _, tokenizer = pair
    ids, expected = reference
    drafter = TokenRecyclingDrafter(len(tokenizer), top_k=4, **mode)
    assert isinstance(drafter, Drafter)
    cold = run(target, ids, drafter, runner, gamma=4)
    assert output_tokens(cold) == expected
    assert int(drafter.known.sum()) > 10  # filled from observe, drafted tokens' rows included
    warm = run(target, ids, drafter, runner, gamma=4)
    assert output_tokens(warm) == expected
    m = summarize(warm)
    assert m.accepted > 0 and m.target_calls < TOKENS
    assert m.target_calls < summarize(cold).target_calls


@pytest.mark.llamacpp
@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_greedy_recycling_on_llamacpp_equals_eager(speculation):
    """llama.cpp's logits (the tiny target's float32 GGUF) fill the matrix as well as PyTorch's."""
    pytest.importorskip("llama_cpp", reason="the optional extra: python -m playground.serve setup llamacpp")
    from playground.models import gguf_file

    target, _, tokenizer = tiny_pair(seed=0)  # its own: recording the GGUF file marks the model
    gguf_file.record(target, gguf_file.written_locator(target, tokenizer))
    prompt = [(7 * i + 3) % 250 for i in range(40)]
    expected = output_tokens(run(target, prompt, None, "eager"))
    drafter = TokenRecyclingDrafter(len(tokenizer), speculation, top_k=4, budget=10, depth=4, branching=2)
    assert output_tokens(run(target, prompt, drafter, "llamacpp", gamma=4)) == expected
    warm = run(target, prompt, drafter, "llamacpp", gamma=4)
    assert output_tokens(warm) == expected and summarize(warm).target_calls < TOKENS


def test_the_matrix_holds_the_targets_top_k_after_each_read_token(pair):
    target, _, tokenizer = pair
    drafter = TokenRecyclingDrafter(len(tokenizer), speculation=CHAIN, top_k=3)
    logits = torch.randn(4, len(tokenizer))
    drafter.observe([7, 9, 7, 300], logits)  # 7 twice: its first row wins; 300 is past the table
    assert drafter.known.nonzero().flatten().tolist() == [7, 9]
    assert drafter.table[7].tolist() == logits[0].topk(3).indices.tolist()
    assert drafter.table[9].tolist() == logits[1].topk(3).indices.tolist()
    chain = drafter.propose([1, 7], 5, None, None).tokens
    assert chain[0] == int(drafter.table[7, 0]) and len(chain) <= 5
    drafter.begin([1, 2, 3])  # a new prompt keeps the matrix
    assert bool(drafter.known[7])
    drafter.reset()
    assert not drafter.known.any() and drafter.propose([1, 7], 5, None, None).tokens == []


def test_the_breadth_first_tree_keeps_its_shape():
    """Budget, depth and per-depth branching respected; children distinct; parents before children
    (a Tree checks that); each child is its parent's row of the matrix, best first; unknown rows
    and end-of-turn tokens are leaves."""
    vocab = 50
    drafter = TokenRecyclingDrafter(vocab, top_k=4, budget=11, depth=3, branching=(3, 2, 2))
    g = torch.Generator().manual_seed(0)
    for t in range(vocab):
        if t != 13:  # 13 stays unknown
            drafter.observe([t], torch.randn(1, vocab, generator=g))
    tree = drafter.propose([5, 6], 8, None, None).tree
    depths = tree.depths
    assert len(tree) == 11 and max(depths) == 3
    assert [depths.count(d) for d in (1, 2, 3)] == [3, 6, 2]  # 3 + 3·2 + the budget's last 2
    for node in [ROOT, *range(len(tree))]:
        kids = tree.children(node)
        parent_token = 6 if node == ROOT else tree.tokens[node]
        width = (3, 2, 2)[0 if node == ROOT else depths[node]] if kids else 0
        assert [tree.tokens[c] for c in kids] == drafter.table[parent_token, :width].tolist()
        assert len(set(tree.tokens[c] for c in kids)) == len(kids)
    assert list(depths) == sorted(depths)  # breadth first
    assert drafter.propose([5, 13], 8, None, None).tree == Tree((), ())  # nothing known after 13
    assert max(drafter.propose([5, 6], 1, None, None).tree.depths) == 1  # the engine's level cap
    root_children = drafter.table[6, :3].tolist()
    cut = drafter.propose([5, 6], 8, None, None, stop_tokens=frozenset(root_children[:1])).tree
    assert cut.children(0) == [] and len(cut) == 11  # the budget went to the other branches
    chain = TokenRecyclingDrafter(vocab, speculation=CHAIN, top_k=4)
    chain.table, chain.known = drafter.table, drafter.known
    tokens = chain.propose([6], 6, None, None).tokens
    assert tokens[0] == root_children[0]
    assert all(int(drafter.table[a, 0]) == b for a, b in zip([6, *tokens], tokens))
    assert chain.propose([6], 6, None, None, stop_tokens=frozenset(tokens[1:2])).tokens == tokens[:2]


@pytest.mark.parametrize("bad,field", [
    (dict(vocab_size=0), r"vocab_size must be an integer in \[1, "),
    (dict(speculation="graph"), "speculation must be one of: chain, tree"),
    (dict(top_k=0), r"top_k must be an integer in \[1, 32\]"),
    (dict(budget=0), r"tree_budget must be an integer in \[1, 256\]"),
    (dict(depth=0), r"tree_depth must be an integer in \[1, 64\]"),
    (dict(branching=0), r"tree_branching must be an integer in \[1, 16\]"),
    (dict(branching=(2, 2)), r"tree_branching must be an integer or one integer per level \(depth 4\)"),
    (dict(branching=(2, 0, 1, 1)), r"tree_branching\[1\] must be an integer in \[1, 16\]"),
    (dict(branching=9, top_k=8), r"tree_branching must be at most top_k \(8\)"),
])
def test_bad_values_name_the_field_and_range(bad, field):
    with pytest.raises(ValueError, match="^" + field):
        TokenRecyclingDrafter(**{"vocab_size": 100, **bad})


def test_top_k_defaults_to_the_papers_eight_or_the_widest_branching():
    assert TokenRecyclingDrafter(100).top_k == 8
    assert TokenRecyclingDrafter(100, branching=12).top_k == 12  # every tree_branching the run allows
    assert TokenRecyclingDrafter(100, depth=2, branching=(10, 2)).top_k == 10
    assert TokenRecyclingDrafter(5, branching=1).top_k == 5  # never wider than the vocabulary


# -- losslessness over two tokens of real (tiny) models ------------------------------------------

JOINT_DRAWS = 1000  # the naive residual failed by p < 1e-9 with 400 draws here
PROMPT_IDS = [3, 3, 6]  # the target is far from sure of either token after it
KNOBS = dict(top_k=4, top_p=0.8)  # top-k and top-p on: the exact joint is the processed target's


def processed_joint(target, prompt, vocab):
    """p(t1, t2 | prompt) at temperature 1 under the run's top-k and top-p."""
    def process(logits):
        return sampling.logits_to_probs(logits, sampling.Sampling(1.0, **KNOBS))

    with torch.inference_mode():
        first = process(target(torch.tensor([prompt])).logits[0, -1])
        second = process(target(torch.tensor([prompt + [t] for t in range(vocab)])).logits[:, -1])
    return (first[:, None] * second).flatten().numpy()


def warmed(target, **mode):
    """A drafter whose matrix already knows every token's row (a few runs from every token), so
    the root gets several children and the chain a full γ."""
    drafter = TokenRecyclingDrafter(8, top_k=4, **mode)
    for start in range(8):
        list(generate(target, [start], SpecConfig(max_new_tokens=6, temperature=1.0, seed=start), drafter))
    assert bool(drafter.known.all())
    proposal = drafter.propose(PROMPT_IDS, 2, None, None)
    if drafter.speculation == CHAIN:
        assert len(proposal.tokens) == 2
    else:
        assert len(proposal.tree.children(ROOT)) == 3
    return drafter


def joint_counts(target, start, draws=JOINT_DRAWS):
    """test_engine's joint counts with top-k and top-p on: counts of the first two tokens over
    `draws` seeds, each draw from a copy of the same warm matrix."""
    counts = np.zeros(8 * 8)
    for seed in range(draws):
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3, **KNOBS)
        out = output_tokens(generate(target, PROMPT_IDS, config, copy.deepcopy(start)))
        counts[out[0] * 8 + out[1]] += 1
    return counts


JOINT_MODES = [dict(speculation=CHAIN), dict(speculation=TREE, budget=6, depth=2, branching=(3, 1))]


@pytest.mark.parametrize("mode", JOINT_MODES, ids=["chain", "tree"])
def test_two_token_joint_follows_target(small_vocab_pair, mode):
    target, _ = small_vocab_pair
    counts = joint_counts(target, warmed(target, **mode))
    fit = goodness_of_fit(counts, processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value > 1e-4, fit


@pytest.mark.parametrize("mode", JOINT_MODES, ids=["chain", "tree"])
def test_two_token_joint_check_catches_the_naive_residual(small_vocab_pair, monkeypatch, mode):
    """Wrong on purpose: after a candidate is rejected the target's distribution is left as it
    was (a chain resamples from p, a tree tries the next child against p and may emit the
    rejected token after all): the candidates' tokens come out too often."""
    target, _ = small_vocab_pair
    start = warmed(target, **mode)  # warmed by the honest rule, then the rule breaks
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    fit = goodness_of_fit(joint_counts(target, start), processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value < 1e-4, fit
