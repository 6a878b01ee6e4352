"""The page says when a draft cannot pay here, before the race (issue 47, item 4): once the pair is
loaded, the stats panel says so where the formula (measure/teach/verdict.py) at the pair's α and the
c and v(k) measured here forecasts under 1.05× at every γ, and keeps saying it through the race;
nowhere else. Real races of the tiny pair; c and v(k) planted as a load would have measured them."""

from __future__ import annotations

import html
from dataclasses import replace

import gradio as gr
import pytest

from playground.app.race import tab as tab_race
from playground.app.shared.context import build_context
from playground.config import RunConfig
from playground.measure.bench import follow
from playground.measure.teach import verdict as V

FLAT = (1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12)  # a GPU's verification: rows cost almost nothing


@pytest.fixture(scope="module")
def race_tab():
    ctx = build_context()
    with gr.Blocks():
        return ctx, tab_race.build(ctx)["view"]


def values(**changes) -> dict:
    return {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
            "pair": "tiny", "max_new_tokens": 8, "temperature": 0.0, "runner": "eager", **changes}


def race(ctx, view, **changes) -> list[str]:
    """Every stats panel the race drew, in order (the first one before the race's first frame)."""
    outputs = tab_race.handle(ctx, view, tab_race.RaceForm("def add(a, b):", "", values(**changes)))
    return [html.unescape(o[view.stats]) for o in outputs if view.stats in o]


@pytest.fixture
def planted(race_tab, monkeypatch):
    """plant(c): the tiny pair with an α of 0.8 and its γ followed from c and a flat v(k), as the load's
    measurement would leave them (nothing is measured at load: the pair's γ is already known)."""
    ctx, _ = race_tab
    monkeypatch.setitem(ctx.registry.pairs, "tiny", replace(ctx.registry.pair("tiny"), alpha=0.8))

    def plant(c: float):
        monkeypatch.setitem(ctx.followed, "tiny", follow.chosen(0.8, c, FLAT, ctx.registry.pair("tiny").gamma, "eager"))

    return plant


def test_a_dear_draft_is_said_before_the_race_and_through_it(race_tab, planted):
    ctx, view = race_tab
    planted(0.9)
    panels = race(ctx, view)
    assert 'id="cannot-pay"' in panels[0] and "The race starts" in panels[0]  # before the first frame
    assert all('id="cannot-pay"' in p for p in panels) and "identical to the baseline" in panels[-1]
    forecast = V.best(0.8, 0.9, FLAT)
    assert "This draft cannot pay on this device" in panels[-1] and "α 0.80 (models.yaml)" in panels[-1]
    assert f"γ {forecast[0]} at {forecast[1]:.2f}×" in panels[-1] and "c 0.90" in panels[-1]
    assert "measured when the pair loaded" in panels[-1]
    assert "What the same measurements favour here:" in panels[-1]


def test_a_cheap_draft_is_not_said(race_tab, planted):
    ctx, view = race_tab
    planted(0.2)
    panels = race(ctx, view)
    assert panels and not any("cannot-pay" in p or "cannot pay" in p for p in panels)


def test_another_drafter_is_not_judged_by_the_draft_models_costs(race_tab, planted):
    ctx, view = race_tab
    planted(0.9)
    assert not any("cannot-pay" in p for p in race(ctx, view, drafter="prompt_lookup"))


def test_without_an_alpha_the_theory_tabs_costs_and_an_assumed_alpha_decide(race_tab):
    """A pair with no α: nothing measured, nothing said; once the Theory tab has measured c and v(k)
    through the race's runner, the verdict takes them with α 0.8 said as assumed, shown exactly where
    the formula forecasts under 1.05×."""
    ctx, view = race_tab
    assert ctx.registry.pair("tiny").alpha is None and "tiny" not in ctx.followed
    assert not any("cannot-pay" in p for p in race(ctx, view))
    pair = ctx.cache.get("tiny")
    cost = ctx.costs.cost(pair, "eager", follow.MAX_GAMMA + 1)  # what the Theory tab's "measure" does
    gamma, speedup = V.best(V.ASSUMED_ALPHA, cost.steps, cost.target.v)  # c over one row and two, as measured
    last = race(ctx, view)[-1]
    assert ("cannot-pay" in last) == (speedup < V.PAYS)
    from playground.app.race import payoff

    said = payoff.before_race(ctx, pair, RunConfig(pair="tiny", runner="eager"), None)
    assert said.speedup == pytest.approx(speedup) and said.gamma == gamma and said.shown == (speedup < V.PAYS)
    assert said.text == "" or "(assumed: nothing has measured" in said.text


def plant_curve(ctx, runner: str, loaded, v, step_s: float) -> None:
    """A curve in the app's per-runner costs as the Theory tab's measurement leaves one (theory.RunnerCosts)."""
    from playground.measure.bench.verify_cost import VerifyCurve, model_key

    holder, key = ctx.costs.curves(runner), model_key(loaded)
    holder.curves[key], holder.latest[loaded.name] = VerifyCurve(tuple(v), step_s, key), key


def test_the_alternatives_come_from_the_boards_and_the_other_runners_measurements(race_tab):
    """No α in models.yaml: the board's α for the draft; c 0.9 on the race's runner, 0.2 on static
    (its plain step a little dearer): static is named with its forecast over the fastest plain step, and
    so is prompt lookup, at the α and c the board measured for it."""
    from playground.app.race import payoff
    from playground.app.shared.context import AppContext

    base, _ = race_tab
    ctx = AppContext(base.registry, base.cache)  # its own costs, board and followed γ
    pair = ctx.cache.get("tiny")
    plant_curve(ctx, "eager", pair.target, FLAT, 0.010)
    plant_curve(ctx, "eager", pair.draft, (1.0, 1.0), 0.009)
    plant_curve(ctx, "static", pair.target, FLAT, 0.011)
    plant_curve(ctx, "static", pair.draft, (1.0, 1.0), 0.0022)
    entries = {"model": (0.6, 0.9), "prompt_lookup": (0.9, 0.01), "suffix": (0.04, 0.01)}
    for entry, (alpha, c) in entries.items():
        run = {"board": {"entry": entry, "round": 2}, "summary": {"prompts": 2, "alpha": alpha, "c": c}}
        ctx.boards.put("s", ("tiny", entry), [run])
    said = payoff.before_race(ctx, pair, RunConfig(pair="tiny", runner="eager"), "s")
    assert said.shown and "α 0.60 (this session's drafts board)" in said.text
    assert "measured by the Theory or Lesson tab" in said.text and "c 0.90" in said.text
    named = {a.what: a.why for a in said.alternatives}
    static = V.best(0.6, 0.2, FLAT)
    assert f"c 0.20 there: {static[1]:.2f}× at γ {static[0]}" in named["runner static"]
    assert f"{static[1] * 10 / 11:.2f}× the fastest plain decoding measured" in named["runner static"]
    assert "prompt lookup: " in named["prompt lookup or suffix decoding"] and "suffix" not in named[
        "prompt lookup or suffix decoding"]  # the board measured suffix decoding short of a gain
    assert payoff.before_race(ctx, pair, RunConfig(pair="tiny", runner="eager"), "another").text.count(
        "assumed") == 1  # another session has no board: α assumed
