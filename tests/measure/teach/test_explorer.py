"""The p/q explorer's numbers on hand-made p and q, and its draws against p (chi-square), with a
broken rule that the same check must catch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from playground.engine import sampling
from playground.measure.teach.explorer import (
    PRESETS,
    distribution,
    draw_batched,
    draw_one,
    draw_real,
    expected_distance,
    verification,
)
from playground.measure.teach.stats import goodness_of_fit, two_sample

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.2, 0.2, 0.4, 0.2])
DRAWS = 10_000
ALARM = 1e-4  # far below what a right rule shows at this many draws, far above a broken one


def test_numbers_on_hand_made_p_and_q():
    v = verification(P, Q)
    np.testing.assert_allclose(v.overlap, [0.2, 0.2, 0.2, 0.0])
    assert v.alpha == pytest.approx(0.6)
    # min(1, p/q): kept surely where p ≥ q, half the time for token 2, never for token 3 (p = 0)
    np.testing.assert_allclose(v.accept, [1.0, 1.0, 0.5, 0.0])
    # rejection mass comes from the tokens the draft over-rates: 0.2 from token 2, 0.2 from token 3
    np.testing.assert_allclose(v.rejected, [0.0, 0.0, 0.2, 0.2])
    assert v.rejected.sum() == pytest.approx(1 - v.alpha)
    # the residual goes where p > q: 0.3 and 0.1 of excess, normalised
    np.testing.assert_allclose(v.residual, [0.75, 0.25, 0.0, 0.0])
    np.testing.assert_allclose(v.resampled, [0.3, 0.1, 0.0, 0.0])
    np.testing.assert_allclose(v.emitted, P)


def test_a_token_the_draft_never_proposes_has_no_acceptance_but_comes_from_the_residual():
    preset = PRESETS["draft misses a token the target likes"]
    v = verification(distribution("p", preset.p), distribution("q", preset.q))
    owl = 3
    assert np.isnan(v.accept[owl]) and v.resampled[owl] == pytest.approx(0.30)
    np.testing.assert_allclose(v.emitted, v.p)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_emits_p(name):
    preset = PRESETS[name]
    v = verification(distribution("p", preset.p), distribution("q", preset.q))
    np.testing.assert_allclose(v.emitted, v.p, atol=1e-12)


def test_identical_and_disjoint_are_the_two_ends_of_alpha():
    same = PRESETS["identical"]
    assert verification(distribution("p", same.p), distribution("q", same.q)).alpha == pytest.approx(1.0)
    apart = PRESETS["disjoint"]
    v = verification(distribution("p", apart.p), distribution("q", apart.q))
    assert v.alpha == 0.0
    np.testing.assert_allclose(v.residual, v.p)


@pytest.mark.parametrize(
    "weights, match",
    [([1.0], "p must have 2 to 8"), ([0.0, 0.0], "positive weight"), ([1.0, -1.0], r"p\[1\] must be in"),
     ([1.0, float("nan")], r"p\[1\] must be a number")],
)
def test_bad_weights_are_refused_with_the_field_named(weights, match):
    with pytest.raises(ValueError, match=match):
        distribution("p", weights)


def test_draw_one_uses_both_branches_of_speculative_verify():
    p = torch.tensor([0.0, 1.0], dtype=torch.float64)
    q = torch.tensor([1.0, 0.0], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    assert draw_one(p, q, g) == (1, False)  # token 0 is drafted, p(0) = 0: rejected, residual gives 1
    assert draw_one(q, q, g) == (0, True)  # p = q: always kept


def sampled_vs_p(p, q, seed=0):
    counts, kept = draw_real(p, q, DRAWS, seed)
    return goodness_of_fit(counts, p), kept


def test_sampled_histogram_follows_p():
    preset = PRESETS["draft over-confident"]
    p, q = distribution("p", preset.p), distribution("q", preset.q)
    fit, kept = sampled_vs_p(p, q)
    assert fit.p_value > ALARM, fit
    assert fit.impossible == 0
    assert 0.4 * DRAWS < kept < 0.8 * DRAWS  # α = 0.5: both branches ran often


def broken_residual(p, q):
    """A classic mistake: after a rejection, resample from p instead of norm(max(0, p − q))."""
    return p


def test_the_same_check_fails_when_the_rule_resamples_from_p(monkeypatch):
    monkeypatch.setattr(sampling, "residual_distribution", broken_residual)
    preset = PRESETS["draft over-confident"]
    fit, _ = sampled_vs_p(distribution("p", preset.p), distribution("q", preset.q))
    assert fit.p_value < ALARM, fit


def test_batched_draws_follow_p_and_match_the_one_at_a_time_draws():
    preset = PRESETS["draft misses a token the target likes"]
    p, q = distribution("p", preset.p), distribution("q", preset.q)
    tokens, kept = draw_batched(torch.tensor(p), torch.tensor(q), DRAWS, torch.Generator().manual_seed(1))
    batched = np.bincount(tokens.numpy(), minlength=len(p))
    real, _ = draw_real(p, q, DRAWS, seed=2)
    assert goodness_of_fit(batched, p).p_value > ALARM
    assert two_sample(batched, real).p_value > ALARM
    assert abs(kept / DRAWS - verification(p, q).alpha) < 0.03


def test_batched_draws_use_the_engines_functions(monkeypatch):
    """A broken residual in sampling breaks the batched draws too: they are not a private copy."""
    monkeypatch.setattr(sampling, "residual_distribution", broken_residual)
    preset = PRESETS["draft over-confident"]
    p, q = distribution("p", preset.p), distribution("q", preset.q)
    tokens, _ = draw_batched(torch.tensor(p), torch.tensor(q), DRAWS, torch.Generator().manual_seed(1))
    assert goodness_of_fit(np.bincount(tokens.numpy(), minlength=len(p)), p).p_value < ALARM


def test_expected_distance_shrinks_like_one_over_root_n():
    p = distribution("p", PRESETS["draft over-confident"].p)
    assert expected_distance(p, 400) == pytest.approx(2 * expected_distance(p, 1600))
    # and it is the distance exact sampling really shows, on average over repeats
    rng = np.random.default_rng(0)
    seen = [goodness_of_fit(rng.multinomial(1600, p), p).total_variation for _ in range(200)]
    assert np.mean(seen) == pytest.approx(expected_distance(p, 1600), rel=0.1)
