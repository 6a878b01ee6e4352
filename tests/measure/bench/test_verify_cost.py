"""v(k), the measured verification cost, and the generalised formula that uses it.

No timing is asserted: the curve is measured on the tiny target with a fake clock that charges a
made-up cost per forward (a kernel working on blocks of 4 rows), so the measurement code runs for
real and its result is exact."""

from __future__ import annotations

import math

import pytest

from playground.measure.bench.verify_cost import VerifyCurves, curve_from_costs, measure_curve
from playground.engine.events import summarize
from playground.engine.sampling import best_gamma, expected_speedup, expected_tokens_per_call, gamma_ceiling, verify_cost


def block_cost(block: int, step: float = 1.0):
    """A kernel that handles `block` rows at a time: k rows cost ceil(k / block) passes."""
    return lambda k: step * math.ceil(k / block)


class FakeClock:
    """Virtual seconds: each forward of the model advances them by cost(k) for its k new tokens."""

    def __init__(self, model, cost):
        self.now = 0.0
        self.cost = cost
        self.handle = model.register_forward_pre_hook(self.charge, with_kwargs=True)

    def charge(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.now += self.cost(ids.shape[1])

    def __call__(self, device) -> float:
        return self.now


@pytest.fixture()
def tiny_target():
    from playground.models.tiny import tiny_pair

    target, _, _ = tiny_pair(0)
    return target


def test_the_generalised_formula_charges_v_and_keeps_the_paper_without_it():
    v = (1.0, 1.0, 1.2, 1.5, 3.0)
    assert expected_speedup(0.8, 4, 0.1) == expected_speedup(0.8, 4, 0.1, None)
    assert math.isclose(expected_speedup(0.8, 4, 0.1, v), expected_tokens_per_call(0.8, 4) / (0.4 + 3.0))
    assert math.isclose(expected_speedup(0.8, 2, 0.1, v), (1 - 0.8**3) / (0.2 * (0.2 + 1.2)))
    assert verify_cost(v, 2.5) == pytest.approx(1.1)  # a mean gamma is fractional: interpolated
    with pytest.raises(ValueError, match=r"k in \[1, 5\], got 6"):
        expected_speedup(0.8, 5, 0.1, v)


def test_the_recommended_gamma_moves_to_where_v_jumps(tiny_target):
    """The paper's formula recommends a long lookahead; a curve measured from a blocked kernel
    pulls it back to the last gamma before the jump, and moving the jump moves the answer."""
    alpha, c = 0.8, 0.05
    assert best_gamma(alpha, c, 8) == 8  # v = 1: the longer the better, up to the cap
    picks = {}
    for block in (2, 4, 6):
        clock = FakeClock(tiny_target, block_cost(block, 0.2))
        curve = measure_curve(tiny_target, max_k=9, repeats=3, clock=clock)
        clock.handle.remove()
        assert curve.v == pytest.approx([math.ceil(k / block) for k in range(1, 10)])
        assert curve.step_s == pytest.approx(0.2)
        picks[block] = best_gamma(alpha, c, 8, v=curve.v)
    assert picks == {2: 1, 4: 3, 6: 5}  # gamma + 1 fills one block exactly


def test_a_wrong_formula_would_not_move_the_pick():
    """The test above can fail: charging v(gamma) instead of v(gamma + 1) picks differently."""
    v = curve_from_costs([math.ceil(k / 4) for k in range(1, 10)]).v

    def wrong_best(alpha, c):
        def charged_v_of_gamma(g):
            return expected_tokens_per_call(alpha, g) / (g * c + (v[g - 1] if g else 1))

        return max(range(9), key=charged_v_of_gamma)

    assert wrong_best(0.8, 0.05) != best_gamma(0.8, 0.05, 8, v=v)


def test_the_adaptive_ceiling_sits_before_the_jump_and_a_flat_curve_has_none():
    """The adaptive schedule's upper bound from the curve: the longest gamma a fully accepted
    draft still pays for. Blocks of 4 rows put it at gamma = 3, blocks of 6 at 5; a flat curve
    leaves it at the longest gamma measured; a costlier draft lowers nothing on a flat curve but
    a jump is never crossed. Charging v(gamma) instead of v(gamma + 1) would put it one past."""
    for block, ceiling in ((4, 3), (6, 5)):
        v = curve_from_costs([math.ceil(k / block) for k in range(1, 10)]).v
        assert gamma_ceiling(0.05, v) == ceiling
        wrong = max(range(1, 9), key=lambda g: (g + 1) / (g * 0.05 + v[g - 1]))
        assert wrong == ceiling + 1
    assert gamma_ceiling(0.3, [1.0] * 9) == 8
    assert gamma_ceiling(0.3, [1.0] * 9, max_gamma=5) == 5
    with pytest.raises(ValueError, match="v\\(1\\) and v\\(2\\)"):
        gamma_ceiling(0.3, [1.0])


def test_curves_are_measured_once_per_model_and_quantization(tiny_target):
    loaded = type("Loaded", (), {"name": "t", "quantization": "none", "dtype": "float32", "device": "cpu",
                                 "model": tiny_target})()
    curves = VerifyCurves()
    first = curves.measure(loaded, max_k=3, repeats=1)
    assert curves.measure(loaded, max_k=3, repeats=1) is first and curves.for_model("t") is first
    assert first.key == ("t", "none", "float32", "cpu", 256) and len(first.v) == 3 and first.v[0] == 1.0
    assert curves.for_model("other") is None


def test_summarize_predicts_with_the_curve_when_given():
    from playground.engine.events import StepEvent

    def event(i, drafts, accepted, verify_s, draft_s=0.0):
        from playground.engine.events import ACCEPTED, REJECTED, DraftToken

        tokens = tuple(DraftToken(1, 0.5, 0.5, 1.0, None, ACCEPTED if j < accepted else REJECTED)
                       for j in range(drafts))
        return StepEvent(i, drafts, tokens, accepted, 2, "bonus", 1.0, (1,) * (accepted + 1),
                         5 if i == 0 else 0, draft_s, verify_s, 0.0)

    spec = [event(i, 3, 2, 0.3, 0.03) for i in range(5)]
    base = [event(i, 0, 0, 0.2) for i in range(10)]
    m = summarize(spec, baseline=base)
    assert m.verify_cost == pytest.approx(1.5) and m.predicted_v == pytest.approx(1.5)
    assert m.predicted_speedup == pytest.approx(expected_tokens_per_call(m.alpha, 3) / (3 * m.c + 1.5))
    assert m.paper_speedup == pytest.approx(expected_speedup(m.alpha, 3, m.c))
    curved = summarize(spec, baseline=base, v=(1.0, 1.1, 1.2, 1.4))
    assert curved.predicted_v == pytest.approx(1.4)
    assert summarize(spec).predicted_v == 1.0  # nothing known: the paper's assumption


def test_the_theory_tab_recommends_from_the_curve_and_draws_it():
    import html

    from playground.app.theory import explain as theory
    from playground.app.theory import plots as theory_plots
    from playground.measure.teach.points import Pooled

    pooled = Pooled(points=2, alpha=0.8, c=0.05, verify_slope=0.0)
    curve = curve_from_costs([0.2 * math.ceil(k / 4) for k in range(1, 10)], key=("t", "nf4", "bf16", "cpu"))
    assert theory.recommended(pooled) == 8 and theory.recommended(pooled, curve) == 3
    page = html.unescape(theory.explain_html([], pooled, "tiny", curve))
    assert "Recommended γ = 3" in page and "It jumps at k = 5" in page and "would pick γ = 8" in page
    assert "set <b>γ max = 3</b>" in page  # the adaptive schedule's bound, from the same curve
    fig = theory_plots.theory_figure([], pooled, 3, curve)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 1 and bars[0].yaxis == "y2" and list(bars[0].y) == pytest.approx(list(curve.v))
    assert any("measured v(γ+1)" in (t.name or "") for t in fig.data)


def test_measure_now_also_measures_the_targets_curve_and_draws_it():
    from types import SimpleNamespace

    import gradio as gr

    from playground.app.shared.context import build_context
    from playground.app.theory import tab as tab_theory
    from playground.app.theory.tab import MeasureForm, handle, redraw_handler

    ctx = build_context()  # its RunnerCosts (ctx.costs) is where the tab keeps the curves it measures
    with gr.Blocks():
        view = tab_theory.build(ctx)["view"]  # the handlers' dicts are keyed by its components
    request = SimpleNamespace(session_hash="me")
    last = list(handle(ctx, view, MeasureForm("def f(n):", "tiny", "model", 0.0, 3, 16, session="me")))[-1]
    figure, explain, status = last[view.plot], last[view.explain], last[view.status]
    curve = ctx.costs.target_curve(ctx.registry.pair("tiny").target)
    assert curve is not None and len(curve.v) == 9 and "Measured at γ = 3" in status
    assert "v(k)" in explain and any(t.type == "bar" for t in figure.data)
    again = redraw_handler(ctx, view)("tiny", "model", 0.0, "", request)
    assert any(t.type == "bar" for t in again[view.plot].data)  # cached: drawn without measuring again
