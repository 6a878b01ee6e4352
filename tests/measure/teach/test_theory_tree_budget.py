"""The tree's budget from a measured v(k), and the forecast that warns when a tree loses to the
chain: pure functions on hand-made curves, then the race's warning line from a real tree race of
the tiny pair read against a hand-made curve (the race itself measures the real one first)."""

from __future__ import annotations

import html

import pytest

from playground.measure.teach.tree_budget import Chain, TreeRun, cheap_budget, forecast, warning

FLAT = [1.0, 1.01, 1.02, 1.02, 1.03, 1.03, 1.04, 1.05, 1.05, 1.06, 1.06, 1.07, 1.08, 1.08, 1.09, 1.1, 1.1]  # k = 1..17
JUMP_AT_5 = [1.0, 1.15, 1.24, 1.41, 2.34, 2.4, 2.5, 2.6, 3.5, 3.6, 3.7, 3.8, 4.7, 4.8, 4.9, 5.0, 6.2]  # blocks of 4


def test_a_flat_curve_gives_the_full_budget_and_a_jump_at_five_stops_before_it():
    assert cheap_budget(FLAT, 16) == 16
    assert cheap_budget(JUMP_AT_5, 16) <= 4
    assert cheap_budget(JUMP_AT_5, 16) == 2  # v(3) = 1.24 is the last within 1.25 steps
    assert cheap_budget(JUMP_AT_5, 16, threshold=1.5) == 3  # v(4) = 1.41
    assert cheap_budget(FLAT[:9], 16) == 8  # nothing vouched for past the measured k
    assert cheap_budget([1.0, 3.0], 16) == 1  # even two rows are dear: the smallest tree
    with pytest.raises(ValueError, match="cap"):
        cheap_budget(FLAT, 0)
    with pytest.raises(ValueError, match="v\\(1\\) and v\\(2\\)"):
        cheap_budget([1.0], 4)


def chain_and_tree(tokens: float, ranks=(0.84, 0.3)) -> tuple[Chain, TreeRun]:
    chain = Chain(alpha=0.84, gamma=3, c=0.35)
    tree = TreeRun(budget=16, nodes=16, levels=4, c_level=0.4, tokens=tokens, depth=4, branching=2, ranks=ranks)
    return chain, tree


def test_a_tree_verified_by_the_jumping_kernel_is_predicted_to_lose_and_the_page_says_so():
    chain, tree = chain_and_tree(tokens=4.2)
    f = forecast(JUMP_AT_5, chain, tree)
    # by hand: chain (1 + .84 + .84² + .84³) / (3·0.35 + v(4) = 1.41) = 1.276; tree 4.2 / (4·0.4 + v(17) = 6.2)
    assert f.loses and f.ratio == pytest.approx((4.2 / 7.8) / (3.1378 / 2.46), rel=1e-3)
    assert f.suggested == 2 and f.suggested_ratio is not None and f.suggested_ratio > f.ratio
    text = warning(f)
    assert text.startswith("the measured v(k) predicts this tree (budget 16) runs at 0.42× the chain (γ 3)")
    assert "try budget 2 (predicted" in text and "× the chain" in text


def test_the_same_tree_on_a_flat_curve_is_not_warned_about():
    chain, tree = chain_and_tree(tokens=4.2)
    f = forecast(FLAT, chain, tree)
    assert not f.loses and warning(f) is None and f.suggested == 16


def test_a_loss_without_a_smaller_cheap_budget_points_to_the_chain():
    chain, tree = chain_and_tree(tokens=1.5)  # a tree that keeps little, on a flat curve
    f = forecast(FLAT, chain, tree)
    assert f.loses and warning(f).endswith("the chain is the faster choice on this device")
    short = forecast(JUMP_AT_5, chain, chain_and_tree(tokens=4.2, ranks=())[1])
    assert short.suggested_ratio is None and "try budget 2 (verified within 1.25 plain steps)" in warning(short)


def test_a_curve_that_does_not_reach_the_tree_is_refused():
    chain, tree = chain_and_tree(tokens=4.2)
    with pytest.raises(ValueError, match="measured for k = 1..9, but the tree verifies 17 rows"):
        forecast(FLAT[:9], chain, tree)


# -- the race's warning, from a real tree race --------------------------------------------------


def run_race(ctx, view, **changes) -> dict:
    from playground.app.race import tab as tab_race
    from playground.config import TREE, RunConfig

    settings = RunConfig(pair="tiny", max_new_tokens=32, temperature=0.0, gamma=3, speculation=TREE, tree_budget=10,
                         tree_depth=3, tree_branching=2, runner="eager")
    values = {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}
    frames = list(tab_race.handle(ctx, view, tab_race.RaceForm("def add(a, b):", "", values)))
    assert "Done." in frames[-1][view.status], frames[-1][view.status]
    return frames[-1]


def test_a_tree_race_measures_the_targets_curve_to_its_nodes_and_warns_from_a_jumping_one(race_tab):
    from playground.measure.bench.verify_cost import VerifyCurve

    ctx, view = race_tab
    target = ctx.registry.pair("tiny").target
    run_race(ctx, view, speculation="chain")
    assert ctx.costs.target_curve(target) is None  # a chain race measures no curve
    run_race(ctx, view)
    measured = ctx.costs.target_curve(target, "eager")
    assert measured is not None and len(measured.v) >= 11  # v(nodes + 1) for a 10-node tree
    # The same key, a curve no tree survives: flat to four rows, then a million plain steps a forward, so
    # the warning holds whatever this race timed (its draft's c, its level cost: at most a few steps)
    holder = ctx.costs.curves("eager")
    key = holder.latest[target]
    holder.curves[key] = VerifyCurve((1.0,) * 4 + (1e6,) * 7, measured.step_s, key)
    stats = html.unescape(run_race(ctx, view)[view.stats])
    assert 'id="tree-warning"' in stats
    assert "The measured v(k) predicts this tree (budget 10) runs at" in stats and "try budget 3" in stats
    chain_stats = run_race(ctx, view, speculation="chain")[view.stats]
    assert "tree-warning" not in chain_stats
