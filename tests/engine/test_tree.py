"""Tree math: the record, its attention mask and positions, greedy and sampled verification with
forced branches on a 10-token vocabulary, and a chi-square losslessness check of SpecInfer's rule
that fails on the naive rule (each child accepted independently with min(1, p/q))."""

import math

import numpy as np
import pytest
import torch

from playground.engine import sampling, tree
from playground.measure.teach.stats import goodness_of_fit
from playground.engine.events import ACCEPTED, REJECTED, UNTESTED
from playground.engine.tree import Tree, greedy_tree_verify, sampled_tree_verify

V = 10


def logits_for_argmax(*tokens):
    """One row per token with a large logit there (+10) and -inf on one other token."""
    rows = torch.zeros(len(tokens), V)
    for r, t in enumerate(tokens):
        rows[r, t] = 10.0
        rows[r, (t + 1) % V] = -math.inf
    return rows


def one_hot(t):
    return torch.nn.functional.one_hot(torch.tensor(t), V).float()


# root ─┬─ 3 (node 0) ── 8 (node 2)
#       └─ 5 (node 1) ─┬─ 2 (node 3)
#                      └─ 7 (node 4) ── 1 (node 5)
SHAPE = Tree(tokens=(3, 5, 8, 2, 7, 1), parents=(-1, -1, 0, 1, 1, 4))


def test_tree_record_depths_children_and_paths():
    assert SHAPE.depths == (1, 1, 2, 2, 2, 3) and SHAPE.depth == 3
    assert SHAPE.children(-1) == [0, 1] and SHAPE.children(1) == [3, 4] and SHAPE.children(5) == []
    assert SHAPE.path_to(5) == [1, 4, 5]


@pytest.mark.parametrize("parents,match", [((-1, 2, 0), r"parents\[1\] must be in \[-1, 0\]"),
                                           ((-1,), "parents must have one entry per token")])
def test_bad_tree_names_the_field(parents, match):
    with pytest.raises(ValueError, match=match):
        Tree(tokens=(1, 2, 3), parents=parents)


def test_mask_lets_a_node_see_only_its_ancestors_and_positions_follow_depth():
    allowed = tree.ancestor_mask(SHAPE)
    assert allowed[5].tolist() == [False, True, False, False, True, True]
    assert allowed[2].tolist() == [True, False, True, False, False, False]
    assert tree.tree_positions(SHAPE, start=10).tolist() == [10, 10, 11, 11, 11, 12]
    full = tree.attention_mask(SHAPE, prefix=4, cached_prefix=2)  # 2 fresh context tokens, then 6 nodes
    assert full.shape == (8, 10)
    assert full[0, :4].tolist() == [True, True, True, False] and full[1, :4].all()
    assert full[2:, :4].all() and torch.equal(full[2:, 4:], allowed)


def test_greedy_follows_the_target_argmax_down_the_tree():
    # after context: 5; after 5: 7; after 7: 1; after 1: 4 (leaf: bonus)
    logits = torch.zeros(7, V)
    logits[0], logits[2], logits[5], logits[6] = logits_for_argmax(5, 7, 1, 4)
    v = greedy_tree_verify(SHAPE, logits)
    assert v.path == [1, 4, 5] and v.next_token == 4 and not v.resampled
    assert v.fates == [REJECTED, ACCEPTED, UNTESTED, REJECTED, ACCEPTED, ACCEPTED]
    assert v.accept_probs == [0.0, 1.0, None, 0.0, 1.0, 1.0]


def test_greedy_stops_where_no_child_matches():
    logits = torch.zeros(7, V)
    logits[0], logits[2] = logits_for_argmax(5, 9)  # after 5 the target wants 9: neither 2 nor 7
    v = greedy_tree_verify(SHAPE, logits)
    assert v.path == [1] and v.next_token == 9 and v.resampled
    v = greedy_tree_verify(SHAPE, logits_for_argmax(6, 0, 0, 0, 0, 0, 0))
    assert v.path == [] and v.next_token == 6 and v.fates[:2] == [REJECTED, REJECTED]


def test_sampled_second_child_tried_against_the_residual():
    """Child 3 has p = 0 (surely rejected); then p_1 = norm(max(0, p - q)) puts all its mass on 5,
    which is accepted for sure; node 1's children are then all rejected (p after 5 is one-hot on 0,
    which q never proposes) and 0 comes from the residual."""
    q = torch.full((7, V), 0.1)
    p = torch.zeros(7, V)
    p[0] = torch.tensor([0.1, 0.1, 0.1, 0.0, 0.1, 0.3, 0.1, 0.1, 0.1, 0.0])
    q[2] = torch.tensor([0.0, 0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.0])  # after node 1 (token 5)
    p[2] = one_hot(0)
    v = sampled_tree_verify(SHAPE, q, p, torch.Generator().manual_seed(0))
    assert v.path == [1] and v.next_token == 0 and v.resampled
    assert v.accept_probs[0] == 0.0 and v.accept_probs[1] == pytest.approx(1.0)
    assert v.fates == [REJECTED, ACCEPTED, UNTESTED, REJECTED, REJECTED, UNTESTED]
    assert v.accept_probs[3] == 0.0 and v.accept_probs[4] == 0.0
    assert torch.allclose(v.next_from, one_hot(0))


def test_sampled_leaf_gives_a_bonus_from_its_own_row():
    single = Tree(tokens=(4,), parents=(-1,))
    p = torch.stack([one_hot(4), one_hot(6)])
    v = sampled_tree_verify(single, p.clone(), p, torch.Generator().manual_seed(1))
    assert v.path == [0] and v.next_token == 6 and not v.resampled and v.uniforms[0] is not None


def test_randomness_only_from_the_given_generator():
    q, p = random_pair(0), random_pair(1)
    a = [sampled_tree_verify(SHAPE, q, p, torch.Generator().manual_seed(5)).next_token for _ in range(3)]
    torch.manual_seed(123)
    b = [sampled_tree_verify(SHAPE, q, p, torch.Generator().manual_seed(5)).next_token for _ in range(3)]
    assert a == b


def random_pair(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(len(SHAPE) + 1, V, generator=g).softmax(-1)


# -- losslessness over two tokens, depth 2, 2-3 i.i.d. children per node ------------------------

W = 6  # vocabulary of the statistical test: 36 joint outcomes
DRAWS = 20_000
SIGNIFICANCE = 1e-4  # a correct rule fails this seeded test by chance with this probability at most
ROOT_CHILDREN, NODE_CHILDREN = 3, 2


def world(seed=3):
    """p and q after the context and after each first token, with holes: q = 0 where p > 0 and p = 0
    where q > 0, so both the residual and the zero-ratio branches fire."""
    g = torch.Generator().manual_seed(seed)
    p1, q1 = torch.rand(W, generator=g) ** 2, torch.rand(W, generator=g) ** 2
    p2, q2 = torch.rand(W, W, generator=g) ** 2, torch.rand(W, W, generator=g) ** 2
    p1[0], q1[1], q1[2] = 0.0, 0.0, 0.0  # q proposes 0, which p never emits; p wants 1 and 2, never drafted
    p2[:, 3], q2[:, 4] = 0.0, 0.0
    q1[0] = 2.0 * q1.sum()  # the draft is badly biased towards 0
    norm = lambda t: t / t.sum(-1, keepdim=True)  # noqa: E731
    return norm(p1), norm(q1), norm(p2), norm(q2)


def exact_joint(p1, p2):
    return (p1[:, None] * p2).flatten().numpy()


def draw_tree(q1, q2, gen):
    """Children drawn i.i.d. from q (duplicates kept): what makes SpecInfer's rule lossless."""
    tokens, parents = [], []
    for x in torch.multinomial(q1, ROOT_CHILDREN, replacement=True, generator=gen).tolist():
        tokens.append(x)
        parents.append(-1)
    for node in range(ROOT_CHILDREN):
        for y in torch.multinomial(q2[tokens[node]], NODE_CHILDREN, replacement=True, generator=gen).tolist():
            tokens.append(y)
            parents.append(node)
    return Tree(tuple(tokens), tuple(parents))


def joint_counts(draws=DRAWS, seed=0):
    p1, q1, p2, q2 = world()
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(W * W)
    for _ in range(draws):
        t = draw_tree(q1, q2, gen)
        rows_p = torch.stack([p1] + [p2[x] if d == 1 else p1 for x, d in zip(t.tokens, t.depths)])
        rows_q = torch.stack([q1] + [q2[x] if d == 1 else q1 for x, d in zip(t.tokens, t.depths)])
        v = sampled_tree_verify(t, rows_q, rows_p, gen)
        out = [t.tokens[i] for i in v.path] + [v.next_token]
        if len(out) == 1:  # the next step would draw the second token from p; any lossless step does
            out.append(sampling.sample(p2[out[0]], gen))
        counts[out[0] * W + out[1]] += 1
    return counts


def test_tree_rule_is_lossless():
    p1, _, p2, _ = world()
    fit = goodness_of_fit(joint_counts(), exact_joint(p1, p2))
    assert fit.impossible == 0
    assert fit.p_value > SIGNIFICANCE, fit


def naive_try_children(p, q, tokens, generator):
    """Wrong on purpose: every child tested against the unchanged p with min(1, p/q), as if each
    were the only candidate; the residual only after all were rejected."""
    ratios, uniforms = [], []
    for i, x in enumerate(tokens):
        ratio = min(1.0, float(p[x] / q[x])) if q[x] > 0 else 0.0
        u = float(torch.rand(1, generator=generator))
        ratios.append(ratio)
        uniforms.append(u)
        if u < ratio:
            return i, p, ratios, uniforms
    return None, sampling.residual_distribution(p, q), ratios, uniforms


def test_same_check_fails_on_the_naive_rule(monkeypatch):
    monkeypatch.setattr(tree, "try_children", naive_try_children)
    p1, _, p2, _ = world()
    fit = goodness_of_fit(joint_counts(), exact_joint(p1, p2))
    assert fit.p_value < SIGNIFICANCE, fit


# -- expected length (Sequoia's positional acceptance) ------------------------------------------


@pytest.mark.parametrize("alpha, gamma", [(0.0, 3), (0.6, 1), (0.6, 5), (0.9, 8), (1.0, 4)])
def test_a_chain_is_the_papers_expected_length(alpha, gamma):
    assert tree.expected_tree_tokens((alpha,), gamma, gamma, 1) == pytest.approx(
        sampling.expected_tokens_per_call(alpha, gamma))


def test_tree_grows_best_first_within_depth_and_branching():
    ranks = (0.5, 0.3)
    # best-first: the root's first child (0.5), its second (0.3), the first child's first (0.25)
    assert tree.expected_tree_tokens(ranks, 1, 4, 2) == pytest.approx(1.5)
    assert tree.expected_tree_tokens(ranks, 2, 4, 2) == pytest.approx(1.8)
    assert tree.expected_tree_tokens(ranks, 3, 4, 2) == pytest.approx(2.05)
    assert tree.expected_tree_tokens(ranks, 9, 1, 2) == pytest.approx(1.8)  # depth 1: two nodes in all
    assert tree.expected_tree_tokens(ranks, 3, 4, 1) == pytest.approx(1 + 0.5 + 0.25 + 0.125)  # a chain


def test_positional_model_matches_a_simulation_of_it():
    """Monte Carlo of the model itself: at each reached node the k-th child is the accepted one
    with probability ranks[k]; the mean accepted length over a full binary tree of depth 3."""
    ranks, depth = (0.55, 0.25), 3
    rng = np.random.default_rng(0)
    total, n = 0, 100_000
    for _ in range(n):
        length = 0
        while length < depth:
            k = rng.choice(3, p=[ranks[0], ranks[1], 1 - sum(ranks)])
            if k == 2:
                break
            length += 1
        total += length + 1
    full = 2 + 4 + 8
    assert tree.expected_tree_tokens(ranks, full, depth, 2) == pytest.approx(total / n, abs=0.01)
