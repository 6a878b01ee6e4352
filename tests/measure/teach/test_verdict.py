"""The 'cannot pay' verdict (measure/teach/verdict.py, issue 47 item 4): shown exactly where the
formula's best speedup over γ, at α and the measured c and v(k), is below PAYS, and naming what the
same measurements favour instead."""

from __future__ import annotations

import pytest

from playground.engine.sampling import expected_speedup
from playground.measure.bench.follow import MAX_GAMMA
from playground.measure.teach import verdict as V

FLAT = (1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12)  # a GPU's verification: rows cost almost nothing
STEEP = (1.0, 1.5, 2.2, 2.9, 3.6, 4.3, 5.0)  # 2 AVX2 cores' int8 kernels: each row most of a step
PAIRS = V.Alpha(0.8, "models.yaml")


def formula_best(alpha, c, v):
    """The best forecast over γ = 1..6, by brute force over the engine's formula."""
    return max(expected_speedup(alpha, g, c, v) for g in range(1, MAX_GAMMA + 1))


def test_planted_c_09_is_shown_and_c_02_is_not():
    dear = V.verdict(PAIRS, V.Costs(0.9, FLAT, "eager", "measured at load"))
    assert dear.shown and dear.speedup == pytest.approx(formula_best(0.8, 0.9, FLAT)) and dear.speedup < V.PAYS
    assert "cannot pay on this device" in dear.text and "α 0.80 (models.yaml)" in dear.text and "c 0.90" in dear.text
    assert f"γ {dear.gamma} at {dear.speedup:.2f}×" in dear.text and "through eager" in dear.text
    cheap = V.verdict(PAIRS, V.Costs(0.2, FLAT, "eager", "measured at load"))
    assert not cheap.shown and cheap.text == "" and cheap.speedup == pytest.approx(formula_best(0.8, 0.2, FLAT))


def test_the_draft_timed_over_two_rows_is_what_the_formula_reads():
    """A draft whose step over two rows was timed is forecast with it (sampling.draft_cost): at c 0.39
    the default pair's forecast pays; read with its two-row step 0.48 after each all-accepted call, it
    pays less, and the page says both."""
    one = V.verdict(PAIRS, V.Costs(0.39, STEEP, "onnxruntime", "measured at load"))
    both = V.Costs((0.39, 0.48), STEEP, "onnxruntime", "measured at load")
    two = V.verdict(PAIRS, both)
    assert two.speedup == pytest.approx(formula_best(0.8, (0.39, 0.48), STEEP)) and two.speedup < one.speedup
    assert "c 0.39 (over two rows 0.48)" in both.said()


@pytest.mark.parametrize("v", [FLAT, STEEP, None], ids=["flat", "steep", "unmeasured"])
@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.95])
def test_shown_exactly_where_the_formulas_best_is_below_the_line(alpha, v):
    for c in [i / 40 for i in range(41)]:
        said = V.verdict(V.Alpha(alpha, "models.yaml"), V.Costs(c, v, "eager", "test"))
        assert said.shown == (formula_best(alpha, c, v) < V.PAYS), (alpha, c)
        assert said.speedup == pytest.approx(formula_best(alpha, c, v))


def test_an_assumed_alpha_and_an_unmeasured_curve_are_said_as_such():
    said = V.verdict(V.Alpha(V.ASSUMED_ALPHA, V.ASSUMED), V.Costs(0.95, None, "eager", "auto's recorded steps"))
    assert said.shown and "(assumed: nothing has measured" in said.text
    assert "v(k) not measured" in said.text and "auto's recorded steps" in said.text


def test_break_even_alpha_is_where_the_forecast_crosses_the_line():
    need = V.break_even_alpha(0.0, STEEP)
    assert formula_best(need, 0.0, STEEP) >= V.PAYS > formula_best(need - 0.01, 0.0, STEEP)
    assert V.break_even_alpha(0.9, STEEP) is None  # at c 0.9 on this curve no α pays


def test_the_alternatives_name_only_what_the_same_measurements_forecast_to_gain():
    assert V.other_runner("compiled", PAIRS, 0.2, FLAT).what == "runner compiled"
    assert V.other_runner("compiled", PAIRS, 0.9, FLAT) is None  # dear there too
    # a gain over that runner's own plain step, but slower than the fastest plain step measured: no win
    assert V.other_runner("compiled", PAIRS, 0.2, FLAT, plain_ms=40.0, fastest_ms=20.0) is None
    assert "2.0 at the fastest" not in V.other_runner("compiled", PAIRS, 0.2, FLAT, 20.0, 20.0).why
    free = V.model_free(STEEP, {})
    assert free.what == "prompt lookup or suffix decoding" and f"α {V.break_even_alpha(0.0, STEEP):.2f}" in free.why
    assert V.model_free(STEEP, {"prompt_lookup": (0.2, 0.01)}) is None  # the board measured it short of a gain
    assert "prompt lookup: " in V.model_free(STEEP, {"prompt_lookup": (0.9, 0.01)}).why
    assert "with 1 of its 4 layers" in V.self_drafting(FLAT, 4, 1).why
    assert V.self_drafting(STEEP, 4, 3) is None  # 3 of 4 layers on a steep curve: no α pays
    sized = [("big", 8 * 10**9), ("huge", 40 * 10**9), ("small", 10**8)]
    bigger = V.bigger_targets(0.9, sized, 3 * 10**9, 20 * 10**9)
    assert "big (8.0 GB)" in bigger.why and "huge" not in bigger.why and "small" not in bigger.why
    assert V.bigger_targets(0.3, sized, 3 * 10**9, 20 * 10**9) is None  # c low: size is not what stops it


def test_the_verdict_names_its_alternatives_or_says_plain_decoding_wins():
    with_runner = V.verdict(PAIRS, V.Costs(0.9, FLAT, "eager", "test"),
                            [None, V.other_runner("compiled", PAIRS, 0.2, FLAT)])
    assert len(with_runner.alternatives) == 1 and "runner compiled: c 0.20 there" in with_runner.text
    alone = V.verdict(PAIRS, V.Costs(0.9, STEEP, "eager", "test"), [V.model_free(STEEP, {"suffix": (0.1, 0.0)})])
    assert alone.alternatives == () and "plain decoding is the fastest" in alone.text
