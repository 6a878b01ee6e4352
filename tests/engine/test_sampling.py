"""The sampling math on hand-made distributions over ten tokens, every branch forced."""

import math

import numpy as np
import pytest
import torch

from playground.engine import sampling
from playground.engine.sampling import (
    Sampling,
    acceptance_probs,
    apply_top_k,
    apply_top_p,
    best_gamma,
    expected_speedup,
    expected_tokens_per_call,
    greedy_verify,
    logits_to_probs,
    residual_distribution,
    speculative_verify,
)
from playground.measure.teach.stats import goodness_of_fit

V = 10
NEG = -math.inf


def one_hot(i, v=V):
    x = torch.zeros(v)
    x[i] = 1.0
    return x


def logits_with(best, second=None):
    """±10 logits that make `best` (then `second`) the clear favourite."""
    x = torch.full((V,), -10.0)
    x[best] = 10.0
    if second is not None:
        x[second] = 9.0
    return x


def test_temperature_zero_is_one_hot_argmax():
    probs = logits_to_probs(logits_with(3, 7), Sampling(temperature=0.0))
    assert torch.equal(probs, one_hot(3))


def test_temperature_flattens_and_sharpens():
    logits = torch.tensor([2.0, 1.0, 0.0])
    hot = logits_to_probs(logits, Sampling(temperature=2.0))
    cold = logits_to_probs(logits, Sampling(temperature=0.5))
    assert hot[0] < logits.softmax(-1)[0] < cold[0]
    assert torch.allclose(hot, (logits / 2).softmax(-1))


def test_top_k_keeps_k_most_likely():
    logits = torch.arange(V, dtype=torch.float)
    kept = apply_top_k(logits, 3)
    assert torch.isinf(kept[:7]).all() and torch.equal(kept[7:], logits[7:])
    probs = logits_to_probs(logits, Sampling(temperature=1.0, top_k=1))
    assert torch.equal(probs, one_hot(9))


def test_top_p_keeps_smallest_set_reaching_mass():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    kept = apply_top_p(probs.log(), 0.8)
    assert torch.isfinite(kept[:2]).all() and torch.isinf(kept[2:]).all()
    # a tiny top_p still keeps the single most likely token
    assert torch.equal(logits_to_probs(probs.log(), Sampling(1.0, top_p=1e-9)), torch.tensor([1.0, 0, 0, 0]))


def test_top_p_matches_transformers_warper():
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    ours = apply_top_p(logits, 0.7)
    theirs = TopPLogitsWarper(0.7)(None, logits.clone())
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))


def test_same_processing_for_p_and_q():
    """One function makes both distributions: same knobs in, same transform out."""
    s = Sampling(temperature=0.7, top_k=4, top_p=0.9)
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(1))
    p, q = logits_to_probs(logits[0], s), logits_to_probs(logits[1], s)
    both = logits_to_probs(logits, s)
    assert torch.equal(both[0], p) and torch.equal(both[1], q)


def test_acceptance_is_min_one_p_over_q():
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    q = torch.tensor([[0.4, 0.6], [0.3, 0.7]])
    ratio = acceptance_probs(p, q, torch.tensor([0, 0]))
    assert torch.allclose(ratio, torch.tensor([0.5, 1.0]))


def test_residual_is_normalised_positive_part():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.5, 0.2, 0.2])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # identical p and q leave nothing: fall back to p rather than divide by zero
    assert torch.equal(residual_distribution(p, p), p)


def test_full_acceptance_adds_bonus_from_last_target_row():
    tokens = torch.tensor([1, 2])
    q = torch.stack([one_hot(1), one_hot(2)])
    p = torch.stack([one_hot(1), one_hot(2), one_hot(7)])
    v = speculative_verify(tokens, q, p, torch.Generator().manual_seed(0))
    assert (v.n_accepted, v.next_token, v.residual) == (2, 7, None)
    assert v.accept_probs == [1.0, 1.0] and len(v.uniforms) == 2


def test_rejection_resamples_from_residual():
    # p puts no mass on the drafted token 4: rejected surely; residual = p minus q = all on 6
    tokens = torch.tensor([1, 4, 5])
    q = torch.stack([one_hot(1), one_hot(4), one_hot(5)])
    p = torch.stack([one_hot(1), one_hot(6), one_hot(5), one_hot(5)])
    v = speculative_verify(tokens, q, p, torch.Generator().manual_seed(0))
    assert (v.n_accepted, v.next_token) == (1, 6)
    assert torch.equal(v.residual, one_hot(6))
    assert len(v.uniforms) == 2  # position 2 was never tested


def test_rejection_at_first_position():
    q = one_hot(2)[None]
    p = torch.stack([one_hot(3), one_hot(3)])
    v = speculative_verify(torch.tensor([2]), q, p, torch.Generator().manual_seed(0))
    assert (v.n_accepted, v.next_token) == (0, 3)


def test_draft_token_where_p_is_zero_and_q_zero_where_p_positive():
    """q = 0 where p > 0 (token 0) and p = 0 where q > 0 (token 1): a draft of 1 is always rejected
    and the residual recovers the target's token 0."""
    p = torch.tensor([0.7, 0.0, 0.3] + [0.0] * (V - 3))
    q = torch.tensor([0.0, 0.6, 0.4] + [0.0] * (V - 3))
    v = speculative_verify(torch.tensor([1]), q[None], torch.stack([p, p]), torch.Generator().manual_seed(0))
    assert v.n_accepted == 0 and v.next_token == 0


def test_greedy_verify_branches():
    target = torch.stack([logits_with(1), logits_with(2), logits_with(3), logits_with(9)])
    assert greedy_verify(torch.tensor([1, 2, 3]), target).n_accepted == 3
    assert greedy_verify(torch.tensor([1, 2, 3]), target).next_token == 9  # bonus
    v = greedy_verify(torch.tensor([1, 5, 3]), target)
    assert (v.n_accepted, v.next_token, v.accept_probs) == (1, 2, [1.0, 0.0, 1.0])
    assert greedy_verify(torch.tensor([0, 2, 3]), target).n_accepted == 0
    assert greedy_verify(torch.tensor([], dtype=torch.long), target[:1]).next_token == 1


def test_randomness_only_from_the_given_generator():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    p = torch.full((2, V), 1.0 / V)
    q = torch.full((1, V), 1.0 / V)
    a = speculative_verify(torch.tensor([3]), q, p, torch.Generator().manual_seed(5))
    b = speculative_verify(torch.tensor([3]), q, p, torch.Generator().manual_seed(5))
    assert a == b or (a.n_accepted, a.next_token, a.uniforms) == (b.n_accepted, b.next_token, b.uniforms)
    assert torch.equal(before, torch.get_rng_state())


def test_theory_formulas():
    assert expected_tokens_per_call(0.0, 4) == 1.0
    assert expected_tokens_per_call(1.0, 4) == 5.0
    assert math.isclose(expected_tokens_per_call(0.5, 2), 1.75)
    assert math.isclose(expected_speedup(0.8, 4, 0.1), (1 - 0.8**5) / (0.2 * 1.4))
    assert best_gamma(0.0, 0.1) == 0 and best_gamma(0.9, 0.01) > best_gamma(0.6, 0.01) > 0


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1),
                                 dict(temperature=float("nan")), dict(top_k=2.5)])
def test_bad_sampling_knobs_name_the_field(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        Sampling(**bad)


# -- statistical losslessness -------------------------------------------------------------------

P = torch.tensor([0.30, 0.25, 0.0, 0.15, 0.10, 0.08, 0.05, 0.04, 0.03, 0.0])
Q = torch.tensor([0.05, 0.40, 0.20, 0.0, 0.10, 0.05, 0.05, 0.05, 0.0, 0.10])  # q=0 where p>0, p=0 where q>0
DRAWS = 20_000
SIGNIFICANCE = 1e-4  # the seeded test fails by chance with this probability at most


def first_token_counts(draws=DRAWS, seed=0):
    """Emit one token by one speculative step with a one-token draft from Q, target P."""
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(V)
    p_rows = torch.stack([P, P])
    for _ in range(draws):
        x = int(torch.multinomial(Q, 1, generator=gen))
        v = speculative_verify(torch.tensor([x]), Q[None], p_rows, gen)
        counts[x if v.n_accepted else v.next_token] += 1
    return counts


def test_emitted_tokens_follow_p():
    fit = goodness_of_fit(first_token_counts(), P)
    assert fit.impossible == 0
    assert fit.p_value > SIGNIFICANCE, fit
    assert fit.total_variation < 0.02


def broken_acceptance(p, q, tokens):
    """Wrong on purpose: min(1, q/p) instead of min(1, p/q)."""
    rows = torch.arange(tokens.shape[0])
    return (q[rows, tokens] / p[rows, tokens].clamp_min(1e-30)).clamp(max=1.0)


def broken_residual(p, q):
    """Wrong on purpose: resample from p instead of norm(max(0, p - q))."""
    return p


@pytest.mark.parametrize("name,wrong", [("acceptance_probs", broken_acceptance),
                                        ("residual_distribution", broken_residual)])
def test_same_check_fails_on_a_broken_rule(monkeypatch, name, wrong):
    monkeypatch.setattr(sampling, name, wrong)
    fit = goodness_of_fit(first_token_counts(), P)
    assert fit.p_value < SIGNIFICANCE, fit


def test_a_draft_cost_of_one_row_and_two_counts_the_catch_up_after_an_all_accepted_call():
    """(c(1), c(2)): γ forwards of one row, the first of two rows with probability α^γ; a number is the paper's γ c."""
    assert sampling.draft_cost(0.3, 0.9, 4) == pytest.approx(1.2)
    assert sampling.draft_cost((0.3, 0.3), 0.9, 4) == pytest.approx(1.2)
    assert sampling.draft_cost((0.36, 0.43), 0.9, 1) == pytest.approx(0.36 + 0.9 * 0.07)
    assert sampling.draft_cost((0.36, 0.43), 0.5, 3) == pytest.approx(3 * 0.36 + 0.125 * 0.07)
    assert sampling.draft_cost((0.36, 0.43), 0.9, 0) == 0.0  # no draft, no catch-up
    at_one_row = sampling.expected_speedup(0.9, 1, 0.36, [1.0, 1.2])
    with_catch_up = sampling.expected_speedup(0.9, 1, (0.36, 0.43), [1.0, 1.2])
    assert with_catch_up == pytest.approx((1 + 0.9) / (0.36 + 0.9 * 0.07 + 1.2)) and with_catch_up < at_one_row
