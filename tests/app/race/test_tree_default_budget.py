"""A tree left at the default budget runs with the largest budget the measured v(k) verifies cheaply,
and the page says so; a budget the user set is kept (the forecast's warning still applies). Pure
functions on hand-made curves, then real tree races of the tiny pair read against a hand-made curve
put where the race's own measurement keeps it (the race measures the real one first). No assertion
rests on what a race timed: the budget comes from the curve alone, and the warning is asserted only
on a curve whose loss no timing can undo (WALL_AT_5)."""

from __future__ import annotations

import html

import pytest

from playground.config import KNOBS, TREE, RunConfig
from playground.measure.teach.tree_budget import default_budget

DEFAULT = KNOBS["tree_budget"].default
# k = 1..17: flat to four rows, then a block of rows more (the int4 CPU kernel's shape)
JUMP_AT_5 = (1.0, 1.05, 1.1, 1.15, 2.3, 2.35, 2.4, 2.45, 3.6, 3.65, 3.7, 3.75, 4.9, 4.95, 5.0, 5.05, 6.2)
FLAT = tuple(1.0 + 0.005 * k for k in range(17))  # memory-bound: the weights read once for all rows
# flat to four rows, then a wall: a tree verifying five rows or more costs a million plain steps, so the
# forecast says it loses to the chain whatever the race's own timings (its c, its level cost) came out as
WALL_AT_5 = (1.0,) * 4 + (1e6,) * 13


def test_a_curve_that_jumps_at_five_gives_budget_three_and_says_why():
    budget, note = default_budget(JUMP_AT_5, DEFAULT)
    assert budget == 3
    assert note == ("tree budget 3, not the default 16: the largest this target verifies within 1.25 plain steps "
                    "on the measured v(k) (v(4) = 1.15; 16 nodes would cost v(17) = 6.20); "
                    "set another budget to override")


def test_a_flat_curve_keeps_the_default_and_says_nothing():
    assert default_budget(FLAT, DEFAULT) == (DEFAULT, None)


def test_a_curve_dear_from_two_rows_gives_the_smallest_tree_and_says_it_is_not_cheap():
    budget, note = default_budget((1.0, 1.4, 1.8), 16)
    assert budget == 1 and "the smallest tree: even 2 rows cost more than 1.25 plain steps" in note
    assert "(v(2) = 1.40)" in note and "largest" not in note
    short_budget, short_note = default_budget(FLAT[:5], 16)  # cheap as far as measured, and no further
    assert short_budget == 4 and "measured to k = 5" in short_note


def test_the_default_a_control_shows_is_the_pairs_suggestion_or_the_knobs_own():
    from playground.app.shared.context import build_context
    from playground.app.shared.controls import shown_default

    ctx = build_context()
    assert shown_default(ctx, "tree_budget", "tiny") == DEFAULT
    assert shown_default(ctx, "gamma", "tiny") == ctx.registry.pair("tiny").gamma  # models.yaml suggests γ


def test_only_a_budget_left_at_its_default_takes_the_curves():
    from playground.app.race.tab import at_cheap_budget
    from playground.app.shared.context import build_context
    from playground.measure.bench.verify_cost import VerifyCurve

    ctx = build_context()
    default = RunConfig(pair="tiny", speculation=TREE)
    jump, flat = VerifyCurve(JUMP_AT_5, 0.01), VerifyCurve(FLAT, 0.01)
    chosen, note = at_cheap_budget(ctx, default, jump)
    assert chosen.tree_budget == 3 and note.startswith("tree budget 3, not the default 16")
    assert chosen == RunConfig(pair="tiny", speculation=TREE, tree_budget=3)  # nothing else moved
    explicit = RunConfig(pair="tiny", speculation=TREE, tree_budget=10)
    assert at_cheap_budget(ctx, explicit, jump) == (explicit, None)
    assert at_cheap_budget(ctx, default, flat) == (default, None)
    assert at_cheap_budget(ctx, default, None) == (default, None)  # no curve (a tree past TREE_K nodes)


# -- real races of the tiny pair ------------------------------------------------------------------


@pytest.fixture
def ran(monkeypatch):
    """The settings each race's frames were made with: the real race_frames, watched."""
    from playground.app.race import tab as tab_race

    seen, real = [], tab_race.race_frames

    def watched(pair, prompt, system, settings, **kw):
        seen.append(settings)
        return real(pair, prompt, system, settings, **kw)

    monkeypatch.setattr(tab_race, "race_frames", watched)
    return seen


def run_race(ctx, view, **changes) -> list[dict]:
    from playground.app.race import tab as tab_race

    values = {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
              "pair": "tiny", "max_new_tokens": 32, "temperature": 0.0, "gamma": 3, "speculation": TREE,
              "tree_depth": 3, "tree_branching": 2, "runner": "eager", **changes}
    frames = list(tab_race.handle(ctx, view, tab_race.RaceForm("def add(a, b):", "", values)))
    assert "Done." in frames[-1][view.status], frames[-1][view.status]
    return frames


def put_curve(ctx, v) -> None:
    """Replace the tiny target's measured curve (same key, same plain step) by a hand-made v(k)."""
    from playground.measure.bench.verify_cost import VerifyCurve

    holder = ctx.costs.curves("eager")
    key = holder.latest[ctx.registry.pair("tiny").target]
    holder.curves[key] = VerifyCurve(tuple(v), holder.curves[key].step_s, key)


def test_a_race_at_the_default_budget_runs_the_curves_budget_and_an_explicit_one_is_kept(race_tab, ran):
    ctx, view = race_tab
    run_race(ctx, view, tree_budget=10)  # measures the real curve, to 11 rows
    assert [s.tree_budget for s in ran] == [10]
    put_curve(ctx, JUMP_AT_5)
    frames = run_race(ctx, view)  # tree_budget left at 16
    assert ran[-1].tree_budget == 3
    stats = html.unescape(frames[-1][view.stats])
    assert 'id="tree-budget"' in stats and "Tree budget 3, not the default 16: the largest this target" in stats
    assert "set another budget to override" in stats
    assert any("Tree budget 3, not the default 16" in html.unescape(f.get(view.status, "")) for f in frames)
    put_curve(ctx, WALL_AT_5)  # a loss the curve alone decides: the warning cannot hang on a timing
    explicit = html.unescape(run_race(ctx, view, tree_budget=10)[-1][view.stats])
    assert ran[-1].tree_budget == 10 and 'id="tree-budget"' not in explicit
    assert 'id="tree-warning"' in explicit and "(budget 10)" in explicit  # the curve still predicts its loss
    chain = run_race(ctx, view, speculation="chain")[-1][view.stats]
    assert ran[-1].tree_budget == DEFAULT and "tree-budget" not in chain  # a chain has no tree to choose


def test_a_flat_curve_keeps_the_default_budget(race_tab, ran):
    ctx, view = race_tab
    run_race(ctx, view, tree_budget=10)  # the curve's key, whatever ran before
    put_curve(ctx, FLAT)
    stats = run_race(ctx, view)[-1][view.stats]
    assert ran[-1].tree_budget == DEFAULT and 'id="tree-budget"' not in stats
