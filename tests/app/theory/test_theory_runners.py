"""The Theory tab's runner section: c and v(k) of the tiny pair measured per runner by its handler,
cached per pair and runner, drawn side by side with the formula's speedup per runner once α is
known. Handlers are called directly; no timing is asserted."""

from __future__ import annotations

import html
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.app.theory import runner_section
from playground.app.theory import runners as runner_views
from playground.app.theory import tab as tab_theory
from playground.config import MODEL

REQUEST = SimpleNamespace(session_hash="learner")


def measure_runners(ctx, view, pair, runners, temperature, gamma):
    """The runner section's Measure handler on its form, as this test's session sends it."""
    form = runner_section.RunnersForm(pair, runners, temperature, gamma, session=REQUEST.session_hash)
    return runner_section.handle(ctx, view, form)


def test_each_chosen_runner_is_measured_once_and_drawn_beside_the_others(tab_view):
    ctx, view = tab_view(tab_theory, "runners")
    last = list(measure_runners(ctx, view, "tiny", ["eager", "static"], 0.0, 3))[-1]
    assert "Measured eager, static." in last[view.status]
    spec = ctx.registry.pair("tiny")
    costs = ctx.costs.known(spec.target, spec.draft)
    assert set(costs) == {"eager", "static"}
    for cost in costs.values():
        assert len(cost.target.v) == runner_section.VERIFY_K and cost.target.v[0] == 1.0
        assert cost.c == pytest.approx(cost.draft.step_s / cost.target.step_s) and cost.c > 0
    lines = [t for t in last[view.v].data if t.type == "scatter"]
    assert sorted(t.name.split(":")[0] for t in lines) == ["eager", "static"]
    explain = html.unescape(last[view.explain])
    assert "<td>eager</td>" in explain and "<td>static</td>" in explain and "needs α" in explain
    assert "launch-bound" in explain and "memory-bound" in explain and "compute-bound" in explain
    assert "Measure α and c now" in str(last[view.speedup].layout.annotations[0].text)  # no α yet: no curve
    again = list(measure_runners(ctx, view, "tiny", ["eager"], 0.0, 3))[-1]
    assert ctx.costs.known(spec.target, spec.draft)["eager"].target is costs["eager"].target  # cached, not re-measured
    assert len([t for t in again[view.v].data if t.type == "scatter"]) == 2  # both still drawn


def test_with_alpha_measured_the_speedup_per_runner_is_the_formulas(tab_view):
    (ctx, main), (_, view) = tab_view(tab_theory), tab_view(tab_theory, "runners")
    list(tab_theory.handle(ctx, main, tab_theory.MeasureForm("def f(n):", "tiny", MODEL, 0.0, 3, 16,
                                                          session=REQUEST.session_hash)))
    drawn = runner_section.redraw_handler(ctx, view)("tiny", 0.0, 3, "", REQUEST)
    spec = ctx.registry.pair("tiny")
    costs = ctx.costs.known(spec.target, spec.draft)
    alpha = ctx.measurements.get("learner")[-1].alpha
    own = {t.name: list(t.y) for t in drawn[view.speedup].data if t.type == "scatter"}
    for runner, cost in costs.items():
        assert own[runner] == pytest.approx([cost.speedup(alpha, g) for g in range(len(cost.target.v))])
        assert f"{runner}, over the fastest plain step" in own
    assert "needs α" not in drawn[view.explain]


def test_a_runner_outside_the_choices_is_a_message_naming_the_field(tab_view):
    ctx, view = tab_view(tab_theory, "runners")
    with pytest.raises(gr.Error, match="runners must be one or more of: eager, static, compiled"):
        list(measure_runners(ctx, view, "tiny", ["warp"], 0.0, 3))
    with pytest.raises(gr.Error, match="runners must be one or more of"):
        list(measure_runners(ctx, view, "tiny", [], 0.0, 3))


def test_the_reading_of_a_curve_names_what_bounds_the_step():
    from playground.measure.teach.theory import RunnerCost
    from playground.measure.bench.verify_cost import curve_from_costs

    gpu = RunnerCost("eager", curve_from_costs([18.9, 19.0, 19.2, 19.5, 20.1]), curve_from_costs([18.1, 18.2]))
    cpu = RunnerCost("eager", curve_from_costs([79, 91, 98, 111, 185]), curve_from_costs([31.6, 38]))
    assert "launch-bound" in runner_views.reading("eager", gpu) and "memory-bound" in runner_views.reading("eager", gpu)
    said = runner_views.reading("eager", cpu)
    assert "launch-bound" not in said and "jump at k = 5" in said


def test_the_sections_costs_follow_the_tabs_draft_model(tab_view):
    """With the tiny target as its own draft, c is its own step over its own step: exactly 1, read from
    the one curve this app run keeps per model; the pair's own draft's row is not shown for it."""
    ctx, view = tab_view(tab_theory, "runners")
    form = runner_section.RunnersForm("tiny", ["eager"], 0.0, 3, "tiny-target", session=REQUEST.session_hash)
    last = list(runner_section.handle(ctx, view, form))[-1]
    assert "Measured eager." in last[view.status]
    assert ctx.costs.known("tiny-target", "tiny-target")["eager"].c == 1.0
    assert "drafted by tiny-target" in last[view.explain] and c_of_eager(last[view.explain]) == "1.00"
    drawn = runner_section.redraw_handler(ctx, view)("tiny", 0.0, 3, "tiny-target", REQUEST)
    assert c_of_eager(drawn[view.explain]) == "1.00"


def c_of_eager(page: str) -> str:
    """The c cell of the eager row of the section's table."""
    import re

    return re.search(r'<td>eager</td>(?:<td class="v">[^<]*</td>){2}<td class="v">([^<]*)</td>', page).group(1)
