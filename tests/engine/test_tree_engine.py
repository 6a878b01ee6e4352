"""Tree speculation through the real engine on tiny random models: greedy identity with
transformers' generate() for several tree shapes, the target cache after a tree step equal to a
full recompute of the accepted context, one target forward per step, the events, and a two-token
joint losslessness test at temperature 1 (failing on the naive rule)."""

import pytest
import torch

from playground.engine import tree as tree_math
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import ACCEPTED, BONUS, RESAMPLED, output_tokens, summarize
from playground.engine.kvcache import CachedModel
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import encode_prompt
from playground.engine.tree import Tree
from playground.config import CHAIN, TREE
from playground.engine.drafters import Drafter, ModelDrafter, PromptLookupDrafter
from playground.engine.tree_drafter import TreeDrafter
from playground.measure.hardware.oracle import OracleDrafter

from test_engine import PROMPT, exact_joint, hf_greedy
from test_engine import joint_counts as engine_joint_counts
from test_tree import naive_try_children

SHAPES = [dict(budget=1, depth=1, branching=1), dict(budget=4, depth=4, branching=1),
          dict(budget=8, depth=3, branching=2), dict(budget=20, depth=5, branching=3),
          dict(budget=64, depth=8, branching=4), dict(budget=24, depth=8, branching=3, width=2)]


@pytest.fixture(scope="module")
def reference(pair):
    target, _, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    return ids, hf_greedy(target, ids, 40)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_greedy_tree_equals_transformers_generate(pair, reference, shape):
    target, draft, _ = pair
    ids, expected = reference
    drafter = TreeDrafter(draft, **shape)
    events = list(generate(target, ids, SpecConfig(max_new_tokens=40), drafter))
    assert output_tokens(events) == expected
    assert summarize(events).target_calls < 40 or shape["depth"] == 1
    for e in events:
        assert e.tree is None or (len(e.tree.nodes) <= shape["budget"] and e.tree.draft_forwards <= shape["depth"])
    assert drafter.lm.cache.get_seq_length() == len(drafter.lm.tokens)


def test_a_tree_with_the_target_as_draft_is_always_accepted(pair, reference):
    target, _, _ = pair
    ids, expected = reference
    events = list(generate(target, ids, SpecConfig(max_new_tokens=40), TreeDrafter(target, 12, 4, 2)))
    assert output_tokens(events) == expected
    assert all(e.n_accepted == min(4, len(e.emitted) - 1) or e.finish for e in events)


def test_cache_after_a_tree_step_equals_a_full_recompute(pair):
    target, _, tokenizer = pair
    context = encode_prompt(tokenizer, PROMPT)
    shape = Tree(tokens=(5, 6, 7, 8, 9, 10), parents=(-1, -1, 0, 1, 1, 4))
    lm = CachedModel(target)
    lm.feed(context[:-3], keep=1)  # a cache that lags the context by a few tokens, as in a run
    lm.logits_for_tree(context, shape)
    lm.keep_path(len(context), [1, 4, 5])  # tokens 6, 9, 10
    accepted = context + [6, 9, 10]
    fresh = CachedModel(target)
    fresh.feed(accepted, keep=1)
    assert lm.tokens == accepted and lm.cache.get_seq_length() == len(accepted)
    for mine, full in zip(lm.cache.layers, fresh.cache.layers):
        torch.testing.assert_close(mine.keys, full.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values, full.values, atol=1e-5, rtol=1e-5)
    nxt = accepted + [42]
    with torch.inference_mode():
        torch.testing.assert_close(lm.logits_for(nxt, keep=1)[-1], target(torch.tensor([nxt])).logits[0, -1],
                                   atol=1e-5, rtol=1e-5)


def test_tree_logits_equal_each_root_path_read_alone(pair):
    target, _, tokenizer = pair
    context = encode_prompt(tokenizer, PROMPT)
    shape = Tree(tokens=(5, 6, 7, 8, 9, 10), parents=(-1, -1, 0, 1, 1, 4))
    logits = CachedModel(target).logits_for_tree(context, shape)
    with torch.inference_mode():
        for row, node in enumerate([-1, *range(len(shape))]):
            seq = context + [shape.tokens[i] for i in shape.path_to(node)]
            torch.testing.assert_close(logits[row], target(torch.tensor([seq])).logits[0, -1], atol=1e-4, rtol=1e-4)


def test_one_target_forward_per_tree_step(pair, reference):
    target, draft, _ = pair
    ids, _ = reference
    widths = []
    handle = target.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]),
                                              with_kwargs=True)
    try:
        events = list(generate(target, ids, SpecConfig(max_new_tokens=30), TreeDrafter(draft, 10, 3, 2)))
    finally:
        handle.remove()
    assert len(widths) == len(events)
    assert widths[0] == len(ids) + len(events[0].tree.nodes)


def test_events_describe_the_tree(pair, reference):
    target, draft, _ = pair
    ids, _ = reference
    events = list(generate(target, ids, SpecConfig(max_new_tokens=40, temperature=1.0, seed=4, detail=3),
                           TreeDrafter(draft, 12, 3, 3)))
    assert {BONUS, RESAMPLED} & {e.next_fate for e in events}
    for e in events:
        if e.tree is None:
            continue
        nodes, path = e.tree.nodes, e.tree.path
        assert e.n_accepted == len(path) and e.emitted[: len(path)] == tuple(nodes[i].token for i in path)
        assert [nodes[i].fate for i in path] == [ACCEPTED] * len(path)
        assert all(nodes[i].parent == (path[j - 1] if j else -1) for j, i in enumerate(path))
        for node in nodes:
            assert 0 <= node.q <= 1 and 0 <= node.p <= 1
            assert node.ratio == pytest.approx(min(1.0, node.p / node.q) if node.q else 0.0, rel=1e-5)
            if node.fate != "untested":
                assert node.uniform is not None and (node.uniform < node.accept_prob) == (node.fate == ACCEPTED)
        assert len(e.drafts) <= e.tree.draft_forwards
        assert e.draft_s > 0 and e.verify_s > 0


def test_width_grows_the_tree_deep_where_the_draft_is_confident(pair, reference):
    _, draft, _ = pair
    ids, _ = reference
    wide = TreeDrafter(draft, budget=24, depth=8, branching=3).propose(ids, 8, SpecConfig().sampling, None)
    deep = TreeDrafter(draft, budget=24, depth=8, branching=3, width=1).propose(ids, 8, SpecConfig().sampling, None)
    assert len(deep.tree) == len(wide.tree) == 24
    assert deep.tree.depth == deep.forwards == 8 > wide.tree.depth
    assert all(len([c for c in range(len(deep.tree)) if deep.tree.depths[c] == d]) == 3 for d in range(1, 9))


@pytest.mark.parametrize("bad,name", [(dict(budget=0), "tree_budget"), (dict(depth=0), "tree_depth"),
                                      (dict(branching=300), "tree_branching"),
                                      (dict(width=-1), "tree_width")])
def test_bad_tree_knobs_name_the_field(pair, bad, name):
    with pytest.raises(ValueError, match=rf"^{name} must be an integer in \[[01], \d+\]"):
        TreeDrafter(pair[1], **bad)


# -- losslessness over two tokens of real (tiny) models ------------------------------------------

JOINT_DRAWS = 1500  # each draw is a whole 3-token run (about 5 forwards); the rule itself is tested
# with 20 000 draws in test_tree.py, this checks the engine wires it to the models correctly


def joint_counts(target, draft, prompt, vocab, draws):
    """test_engine's joint counts, drafted by a tree (γ plays no part in a tree step)."""
    return engine_joint_counts(target, draft, prompt, vocab, draws,
                               make_drafter=lambda: TreeDrafter(draft, budget=6, depth=2, branching=2))


def test_two_token_joint_follows_target(small_vocab_pair):
    target, draft = small_vocab_pair
    prompt = [1, 5, 2]
    fit = goodness_of_fit(joint_counts(target, draft, prompt, 8, JOINT_DRAWS), exact_joint(target, prompt, 8))
    assert fit.p_value > 1e-4, fit


def test_two_token_joint_check_catches_the_naive_rule(small_vocab_pair, monkeypatch):
    monkeypatch.setattr(tree_math, "try_children", naive_try_children)
    target, draft = small_vocab_pair
    prompt = [1, 5, 2]
    fit = goodness_of_fit(joint_counts(target, draft, prompt, 8, JOINT_DRAWS), exact_joint(target, prompt, 8))
    assert fit.p_value < 1e-4, fit


def test_acceptance_by_rank_counts_reached_nodes_children(pair):
    """hits and trials per child rank: a hand-made tree, then a real run's totals."""
    from dataclasses import replace

    from playground.engine.events import TreeNode, TreeRecord, acceptance_by_rank

    def node(parent, fate):
        return TreeNode(1, parent, 1, 0.5, 0.5, 1.0, None, None, fate)

    # root: children 0 (rejected), 1 (accepted); node 1: children 2 (accepted); node 2: child 3 (rejected);
    # node 0's child 4 is never reached.
    record = TreeRecord((node(-1, "rejected"), node(-1, "accepted"), node(1, "accepted"), node(2, "rejected"),
                         node(0, "untested")), path=(1, 2), draft_forwards=3)
    target, draft, tokenizer = pair
    events = list(generate(target, encode_prompt(tokenizer, PROMPT), SpecConfig(max_new_tokens=12),
                           TreeDrafter(draft, budget=8, depth=3, branching=2)))
    assert acceptance_by_rank([replace(events[0], tree=record)]) == ([1, 1], [3, 1])
    hits, trials = acceptance_by_rank(events)
    assert sum(hits) == sum(len(e.tree.path) for e in events if e.tree is not None)
    assert trials[0] >= trials[-1] and all(h <= t for h, t in zip(hits, trials))


def test_a_trees_prediction_charges_verifying_all_its_nodes(pair):
    target, draft, tokenizer = pair
    events = list(generate(target, encode_prompt(tokenizer, PROMPT), SpecConfig(max_new_tokens=16),
                           TreeDrafter(draft, budget=8, depth=3, branching=2)))
    v = [float(k) for k in range(1, 11)]  # v(k) = k: the cost read off the curve is nodes + 1
    nodes = sum(len(e.tree.nodes) for e in events if e.tree is not None) / len(events)
    assert nodes > 3  # more nodes than levels: a chain's k = γ + 1 would be too few
    assert summarize(events, v=v).predicted_v == pytest.approx(nodes + 1)


def test_one_drafter_protocol_covers_chains_and_trees(pair):
    """Every drafter, the tree's too, fits the one protocol, and says by `speculation` which kind
    of proposal it makes: generate() dispatches on that and nothing else."""
    target, draft, tokenizer = pair
    tree = TreeDrafter(draft, budget=6, depth=2, branching=2)
    chains = [ModelDrafter(draft), PromptLookupDrafter(1, 3), OracleDrafter([1, 2, 3])]
    assert all(isinstance(d, Drafter) for d in [tree, *chains])
    assert tree.speculation == TREE and {d.speculation for d in chains} == {CHAIN}
    ids = encode_prompt(tokenizer, PROMPT)
    proposal = tree.propose(ids, 2, SpecConfig().sampling, None)  # the protocol's call, a tree back
    assert len(proposal.tree) <= 6 and max(proposal.tree.depths) <= 2
    events = list(generate(target, ids, SpecConfig(max_new_tokens=12), tree))
    assert all(e.tree is not None for e in events[:-1])  # the last call may have no room for a draft


def test_a_drafter_outside_the_protocol_is_refused_by_name(pair):
    target, draft, _ = pair

    class NoKind:  # a drafter that does not say whether it drafts a chain or a tree
        name, vocab_size, device = "no kind", None, None

        def begin(self, ids):
            pass

        def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="drafter must follow the Drafter protocol .*speculation.*got NoKind"):
        list(generate(target, [65, 66], SpecConfig(max_new_tokens=4), NoKind()))
    odd = PromptLookupDrafter(1, 3)
    odd.speculation = "graph"
    with pytest.raises(ValueError, match=r"drafter.speculation must be one of \('chain', 'tree'\), got 'graph'"):
        list(generate(target, [65, 66], SpecConfig(max_new_tokens=4), odd))
