"""Suffix decoding: the index (every substring's count, the longest match, incremental appends and
forgetting equal to a fresh build), the drafter's chains and trees, greedy identity on the tiny
pair, memory across runs, and two-token losslessness at temperature 1 with top-k / top-p (failing
when deterministic candidates are verified as if drawn from a shared q)."""

import collections
import random

import numpy as np
import pytest
import torch

from playground.config import CHAIN, TREE
from playground.engine import sampling
from playground.engine import tree as tree_math
from playground.engine.drafters import Drafter
from playground.engine.events import output_tokens, summarize
from playground.engine.generate import SpecConfig, generate
from playground.engine.sampling import Sampling, logits_to_probs
from playground.engine.suffix import SuffixDrafter, SuffixIndex
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import encode_prompt

from test_engine import PROMPT, hf_greedy

GREEDY = Sampling(0.0, 0, 1.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# -- the index ---------------------------------------------------------------------------------


def brute_counts(sequences, reach):
    """Every substring of at most `reach` tokens and how often it occurs, by counting."""
    counts = collections.Counter()
    for seq in sequences:
        for i in range(len(seq)):
            for j in range(i + 1, min(len(seq), i + reach) + 1):
                counts[tuple(seq[i:j])] += 1
    return dict(counts)


def index_counts(index):
    """The same, read off the index's compressed tree (each edge token carries the edge's count)."""
    out = {}

    def walk(node, path):
        for child in node.children.values():
            here = list(path)
            for token in child.edge:
                here.append(token)
                out[tuple(here)] = child.count
            walk(child, here)

    walk(index.root, [])
    return out


def test_counts_are_occurrences():
    index = SuffixIndex(reach=4)
    index.open([1, 2, 3, 1, 2, 4, 1, 2])
    assert index.count([1, 2]) == 3 and index.count([1, 2, 3]) == 1 and index.count([2, 4, 1, 2]) == 1
    assert index.count([3, 3]) == 0 and index.count([]) == 0
    assert index.count([1, 2, 4, 1, 2]) == 0  # longer than the reach: not indexed


def test_longest_match_is_the_longest_suffix_that_went_on():
    index = SuffixIndex(reach=8)
    index.open([7, 1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3])
    length, node = index.longest_match(max_match=8)
    assert length == 3 and set(node.children) == {9}  # "1 2 3" went on once, with 9
    length, node = index.longest_match(max_match=2)
    assert length == 2 and {t: c.count for t, c in node.children.items()} == {9: 1, 8: 1}  # "2 3"
    index.append(6)
    assert index.longest_match(8) == (0, None)  # "... 3 6" never occurred before


@pytest.mark.parametrize("seed", range(40))
def test_appending_and_forgetting_equal_a_fresh_build(seed):
    rng = random.Random(seed)
    reach = rng.randint(1, 7)
    grown, live = SuffixIndex(reach), []
    for _ in range(rng.randint(1, 5)):
        seq = [rng.randint(0, 2) for _ in range(rng.randint(0, 40))]
        cut = rng.randint(0, len(seq))
        live.append((grown.open(seq[:cut]), seq))
        for token in seq[cut:]:
            grown.append(token)
        if rng.random() < 0.4:
            grown.forget(live.pop(rng.randrange(len(live)))[0])
    fresh = SuffixIndex(reach)
    for _, seq in live:
        fresh.open(seq)
    expected = brute_counts([seq for _, seq in live], reach)
    assert index_counts(grown) == index_counts(fresh) == expected


def test_the_tree_stays_compressed():
    """About two nodes a token, not `reach` of them: a unique suffix is one growing edge."""
    rng = random.Random(0)
    index = SuffixIndex(reach=48)
    index.open([rng.randrange(1000) for _ in range(2000)])
    nodes, stack = 0, [index.root]
    while stack:
        node = stack.pop()
        nodes += len(node.children)
        stack.extend(node.children.values())
    assert nodes < 2 * 2000


# -- the drafter -------------------------------------------------------------------------------


def fed(drafter, *sequences):
    """A drafter that has seen these sequences in earlier runs (the last one: this run's prompt)."""
    for seq in sequences:
        drafter.begin(list(seq))
    return drafter


def test_chain_is_the_most_frequent_path_and_grows_with_the_match():
    history = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7], [9, 3, 4, 8, 8, 8, 8]]
    drafter = fed(SuffixDrafter(CHAIN, min_prob=0.0), *history, [0, 0])
    assert drafter.propose([0, 0, 2, 3, 4], 8, GREEDY, None).tokens == [5, 6, 7]  # match "2 3 4": 3 tokens
    assert drafter.propose([0, 0, 2, 3, 4, 5], 2, GREEDY, None).tokens == [6, 7]  # at most k
    assert drafter.propose([0, 0, 2, 3, 4, 5, 9, 4], 8, GREEDY, None).tokens == [5]  # match "4": 1 token
    wide = fed(SuffixDrafter(CHAIN, min_prob=0.0, spec_factor=8.0), *history, [0, 3, 4])
    assert wide.propose([0, 3, 4], 8, GREEDY, None).tokens == [5, 6, 7]  # "3 4": 5 twice, 8 once
    assert wide.propose([0, 3, 4], 8, GREEDY, None, stop_tokens=frozenset([6])).tokens == [5, 6]
    sure = fed(SuffixDrafter(CHAIN, min_prob=0.7, spec_factor=8.0), *history, [0, 3, 4])
    assert sure.propose([0, 3, 4], 8, GREEDY, None).tokens == []  # 2/3 < 0.7
    assert sure.propose([0, 3, 4], 8, GREEDY, None).q is None


def test_tree_holds_distinct_children_by_count_within_budget_and_depth():
    history = [[3, 4, 5, 6], [3, 4, 5, 7], [3, 4, 8, 9], [3, 4, 5, 6]]
    drafter = fed(SuffixDrafter(TREE, budget=16, depth=2, min_prob=0.0, spec_factor=8.0), *history, [0, 3, 4])
    draft = drafter.propose([0, 3, 4], 4, GREEDY, None)
    tree = draft.tree
    assert draft.q is None and draft.forwards == 0 and tree.depth == 2
    assert [tree.tokens[c] for c in tree.children(-1)] == [5, 8]  # 3 of 4, then 1 of 4
    five = tree.children(-1)[0]
    assert [tree.tokens[c] for c in tree.children(five)] == [6, 7]  # 6 twice, 7 once
    for node in [-1, *range(len(tree))]:
        kids = [tree.tokens[c] for c in tree.children(node)]
        assert len(kids) == len(set(kids))
    small = fed(SuffixDrafter(TREE, budget=2, depth=4, min_prob=0.0, spec_factor=8.0), *history, [0, 3, 4])
    assert small.propose([0, 3, 4], 4, GREEDY, None).tree.tokens == (5, 6)  # the two likeliest nodes
    cut = fed(SuffixDrafter(TREE, budget=16, depth=4, min_prob=0.3, spec_factor=8.0), *history, [0, 3, 4])
    assert cut.propose([0, 3, 4], 4, GREEDY, None).tree.tokens == (5, 6)  # 5 (.75), 6 (.5); 7, 8 (.25) cut
    stop = fed(SuffixDrafter(TREE, budget=16, depth=4, min_prob=0.0, spec_factor=8.0), *history, [0, 3, 4])
    assert 9 not in stop.propose([0, 3, 4], 4, GREEDY, None, stop_tokens=frozenset([8])).tree.tokens


def test_context_that_is_not_a_continuation_is_indexed_again():
    drafter = SuffixDrafter(CHAIN, min_prob=0.0)
    drafter.begin([1, 2, 3, 1, 2])
    assert drafter.propose([1, 2, 3, 1, 2], 4, GREEDY, None).tokens == [3, 1]  # "1 2": 2 tokens
    assert drafter.propose([5, 6, 5], 4, GREEDY, None).tokens == [6]  # a different context altogether
    assert drafter.index.count([1, 2]) == 0
    fresh = SuffixIndex(drafter.index.reach)
    fresh.open([5, 6, 5])
    assert index_counts(drafter.index) == index_counts(fresh)


def test_history_is_bounded():
    drafter = SuffixDrafter(CHAIN, history=2)
    for run in range(5):
        drafter.begin([run, run, 7])
    assert len(drafter.index.sequences) == 3  # two earlier ones and the current one
    assert drafter.index.count([7]) == 3 and drafter.index.count([1, 1]) == 0


def test_suffix_drafters_follow_the_protocol():
    chain, tree = SuffixDrafter(), SuffixDrafter(TREE, budget=8, depth=3)
    assert isinstance(chain, Drafter) and isinstance(tree, Drafter)
    assert chain.speculation == CHAIN and tree.speculation == TREE and tree.depth == 3
    assert chain.vocab_size is None and chain.device is None
    empty = tree.propose([1, 2, 3], 3, GREEDY, None)  # proposing before begin, nothing matched
    assert len(empty.tree) == 0 and empty.q is None


@pytest.mark.parametrize("bad,name", [
    (dict(speculation="graph"), "speculation must be one of"),
    (dict(budget=0), r"tree_budget must be .*\[1, "),
    (dict(depth=0), r"tree_depth must be .*\[1, "), (dict(max_match=0), r"max_match must be .*\[1, 256\]"),
    (dict(max_spec=65), r"max_spec must be .*\[1, 64\]"),
    (dict(spec_factor=0.0), r"spec_factor must be in \(0"),
    (dict(min_prob=1.5), r"min_prob must be in \[0.0, 1.0\]"), (dict(history=-1), r"history must be .*\[0, "),
    (dict(max_match="8"), "max_match must be an integer"),
])
def test_bad_constructor_values_name_the_field(bad, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        SuffixDrafter(**bad)


# -- through the engine on the tiny pair ---------------------------------------------------------


@pytest.fixture(scope="module")
def reference(pair):
    target, _, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    return ids, hf_greedy(target, ids, 40)


@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_greedy_equals_transformers_generate_and_memory_carries_over(pair, reference, speculation):
    """The tiny target falls into a loop, which suffixes find; a second run of the same prompt
    finds the first run's output too and drafts more."""
    target, _, _ = pair
    ids, expected = reference
    drafter = SuffixDrafter(speculation, budget=8, depth=4, spec_factor=4.0)
    first = list(generate(target, ids, SpecConfig(max_new_tokens=40, gamma=4), drafter))
    second = list(generate(target, ids, SpecConfig(max_new_tokens=40, gamma=4), drafter))
    assert output_tokens(first) == output_tokens(second) == expected
    one, two = summarize(first), summarize(second)
    assert one.accepted > 0 and one.target_calls < 40
    assert two.drafted > one.drafted and two.target_calls < one.target_calls


def test_repeated_text_is_drafted_and_accepted(pair, reference):
    """A fresh drafter on a prompt whose text repeats (the tiny target's own loop, copied into
    the prompt): the first step already drafts from the prompt, and drafts are accepted."""
    target, _, _ = pair
    ids, expected = reference
    prompt = ids + expected[:28]  # its loop starts at the 20th token
    drafter = SuffixDrafter(spec_factor=2.0)
    events = list(generate(target, prompt, SpecConfig(max_new_tokens=12, gamma=4), drafter))
    assert output_tokens(events) == expected[28:40]
    m = summarize(events)
    assert events[0].drafts and m.accepted > 0 and m.target_calls < 12


# -- losslessness: the first two tokens at temperature 1, top-k / top-p on ----------------------

JOINT_DRAWS = 1500
PROMPT_IDS = [1, 5, 2]
# Earlier runs through the prompt with several continuations: "1 5 2" went on with 3 (twice), 6 and
# 0, and each of those further, so chains and trees draft at both steps.
HISTORY = [[1, 5, 2, 3, 4, 1], [1, 5, 2, 3, 7, 2], [1, 5, 2, 6, 1, 6], [1, 5, 2, 0, 3, 5]]
KNOBS = {"top_k": dict(top_k=6), "top_p": dict(top_p=0.9)}


def make(speculation):
    return fed(SuffixDrafter(speculation, budget=6, depth=2, spec_factor=2.0, min_prob=0.0), *HISTORY)


def exact_joint(target, prompt, vocab, knobs):
    """p(t1, t2 | prompt) from the target's own forwards, processed as the run processes them."""
    rule = Sampling(1.0, knobs.get("top_k", 0), knobs.get("top_p", 1.0))
    with torch.inference_mode():
        first = logits_to_probs(target(torch.tensor([prompt])).logits[0, -1], rule)
        batch = torch.tensor([prompt + [t] for t in range(vocab)])
        second = logits_to_probs(target(batch).logits[:, -1], rule)
    return (first[:, None] * second).flatten().numpy()


def joint_counts(target, prompt, vocab, speculation, knobs, draws=JOINT_DRAWS):
    counts, drafted = np.zeros(vocab * vocab), 0
    for seed in range(draws):
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3, **knobs)
        events = list(generate(target, prompt, config, make(speculation)))
        out = output_tokens(events)
        counts[out[0] * vocab + out[1]] += 1
        drafted += summarize(events).drafted
    return counts, drafted


def test_the_history_gives_several_candidates():
    tree = fed(make(TREE), PROMPT_IDS).propose(PROMPT_IDS, 2, GREEDY, None).tree  # as the engine calls it
    assert len(tree.children(-1)) == 3 and tree.depth == 2 and len(tree) == 6
    chain = fed(make(CHAIN), PROMPT_IDS).propose(PROMPT_IDS, 2, GREEDY, None)
    assert chain.tokens == [3, 7]  # after 3, 4 and 7 tie: the latest wins


@pytest.mark.parametrize("knob", KNOBS)
@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_two_token_joint_follows_target(small_vocab_pair, speculation, knob):
    target, _ = small_vocab_pair
    counts, drafted = joint_counts(target, PROMPT_IDS, 8, speculation, KNOBS[knob])
    assert drafted > JOINT_DRAWS  # the drafts did play a part
    fit = goodness_of_fit(counts, exact_joint(target, PROMPT_IDS, 8, KNOBS[knob]))
    assert fit.p_value > 1e-4, fit


def shared_q_try_children(p, q, tokens, generator):
    """Wrong on purpose: deterministic candidates verified as if each were drawn from one shared
    q, uniform over them (SpecInfer's rule needs candidates i.i.d. from q, which these are not)."""
    shared = torch.zeros_like(p)
    shared[tokens] = 1.0 / len(tokens)
    ratios, uniforms = [], []
    for i, x in enumerate(tokens):
        ratio = float(sampling.acceptance_probs(p[None], shared[None], torch.tensor([x]))[0])
        u = float(torch.rand(1, generator=generator))
        ratios.append(ratio)
        uniforms.append(u)
        if u < ratio:
            return i, p, ratios, uniforms
        p = sampling.residual_distribution(p, shared)
    return None, p, ratios, uniforms


@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_two_token_joint_check_catches_a_wrong_rule(small_vocab_pair, monkeypatch, speculation):
    """Trees: the shared-q rule; chains (one candidate a position): a residual that keeps the
    rejected token."""
    if speculation == TREE:
        monkeypatch.setattr(tree_math, "try_children", shared_q_try_children)
    else:
        monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    target, _ = small_vocab_pair
    counts, _ = joint_counts(target, PROMPT_IDS, 8, speculation, KNOBS["top_k"])
    fit = goodness_of_fit(counts, exact_joint(target, PROMPT_IDS, 8, KNOBS["top_k"]))
    assert fit.p_value < 1e-4, fit
