"""The pair's γ following the machine (measure/bench/follow.py): the formula's best γ at the pair's
α and the measured c and v(k); the benchmark takes it where --gamma is not given, and the page
suggests it once a load measured it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from playground.config import RunConfig
from playground.engine.sampling import best_gamma, expected_speedup
from playground.measure.bench import cli, follow
from playground.measure.bench.prompts import EXAMPLE, Prompt
from playground.measure.bench.sweep import Grid, make_plan
from playground.models.pair_cache import PairCache
from playground.models.registry import load_registry

REGISTRY = load_registry()
TINY = replace(REGISTRY.pair("tiny"), alpha=0.8)  # the tiny pair as if models.yaml stated its α
PROMPTS = [Prompt("p1", EXAMPLE, "def add(a, b):")]
FLAT = (1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12)  # verification as a GPU's: rows cost almost nothing
STEEP = (1.0, 1.5, 2.2, 2.9, 3.6, 4.3, 5.0)  # as 2 AVX2 cores' int8 kernels: each row most of a step


def test_gamma_is_the_formulas_best_for_the_pairs_alpha_at_the_measured_costs():
    flat, steep = follow.chosen(0.8, 0.1, FLAT, 3, "eager"), follow.chosen(0.8, 0.1, STEEP, 3, "eager")
    assert flat.gamma == best_gamma(0.8, 0.1, follow.MAX_GAMMA, FLAT) > steep.gamma == 1
    assert flat.forecast == pytest.approx(expected_speedup(0.8, flat.gamma, 0.1, FLAT))
    assert "γ 1 suits this pair here:" in steep.line() and "v(2) 1.50" in steep.line()
    # a draft too dear for its acceptance: the least γ, and the sentence says nothing pays
    hopeless = follow.chosen(0.3, 0.9, STEEP, 3, "eager")
    assert hopeless.gamma == 1 and hopeless.forecast < 1 and "expects no gain" in hopeless.line()


@pytest.fixture(scope="module")
def loaded():
    return PairCache(REGISTRY).get("tiny")


def test_a_plan_on_the_pairs_gamma_takes_the_followed_one(loaded, kept_curves):
    base = RunConfig(pair="tiny", gamma=TINY.gamma, max_new_tokens=8)
    plan = make_plan(Grid(base, {"temperature": [0.0, 0.7]}), PROMPTS)
    said = []
    followed_plan, followed = follow.followed_plan(plan, loaded, TINY, said.append)
    assert len(followed.v) == follow.MAX_GAMMA + 1 and followed.v[0] == 1.0 and followed.c > 0 and followed.c_two > 0
    assert followed.steps == (followed.c, followed.c_two) and "over the two rows" in followed.line()  # the catch-up
    again = follow.chosen(0.8, followed.steps, followed.v, TINY.gamma, followed.runner)
    assert (again.gamma, again.forecast) == (followed.gamma, followed.forecast)
    assert [c.gamma for c in followed_plan.cells] == [followed.gamma] * 2
    assert [c.temperature for c in followed_plan.cells] == [0.0, 0.7]  # nothing else moved
    assert said[-1] == followed.line()
    from playground.measure.bench.curve_store import CurveStore  # the target's curve kept for later starts
    from playground.models.shape import of_loaded

    kept = CurveStore(kept_curves).find(of_loaded(loaded.target.model), "cpu", runner=followed.runner)
    assert kept is not None and kept.curve.v == followed.v and kept.model == loaded.target.name
    # where the pair's α does not speak for the run, or γ is swept, the plan stays as it was
    for unchanged in (make_plan(Grid(base, {"gamma": [1, 2]}), PROMPTS),
                      make_plan(Grid(replace(base, drafter="prompt_lookup")), PROMPTS),
                      make_plan(Grid(replace(base, draft="tiny-target")), PROMPTS)):
        assert follow.followed_plan(unchanged, loaded, TINY, said.append) == (unchanged, None)
    assert follow.followed_plan(plan, loaded, REGISTRY.pair("tiny"), said.append) == (plan, None)  # no α


def test_the_benchmark_follows_the_pairs_gamma_unless_gamma_is_given(tmp_path, monkeypatch):
    text = Path(REGISTRY.path).read_text().replace("    random_weights: true\n    gamma: 4\n",
                                                    "    random_weights: true\n    gamma: 4\n    alpha: 0.8\n")
    assert "alpha: 0.8" in text
    (tmp_path / "models.yaml").write_text(text)
    monkeypatch.setenv("PLAYGROUND_CONFIG", str(tmp_path / "models.yaml"))
    run = ["--pair", "tiny", "--categories", "coding", "--limit", "1", "--max-new-tokens", "6", "--repeats", "1",
           "--warmup", "0", "--json"]
    assert cli.main([*run, str(tmp_path / "followed.json")]) == 0
    report = json.loads((tmp_path / "followed.json").read_text())
    followed = report["config"]["gamma_followed"]
    assert report["runs"][0]["settings"]["gamma"] == followed["gamma"] and followed["alpha"] == 0.8
    assert followed["fixed"] == 4 and len(followed["v"]) == follow.MAX_GAMMA + 1
    assert cli.main([*run, str(tmp_path / "given.json"), "--gamma", "2"]) == 0
    given = json.loads((tmp_path / "given.json").read_text())
    assert given["runs"][0]["settings"]["gamma"] == 2 and "gamma_followed" not in given["config"]


# -- after a run: the advice follows the α the run measured ---------------------------------------
# The page's case (issue 38): models.yaml's α 0.81 calls for γ 1 (a forecast 1.26×) at these costs; a
# race at γ 3 then measured α 0.96 and 1.43×
ISSUE_V = (1.0, 1.08, 1.26, 1.43, 1.6, 1.8, 2.0)


def test_the_advice_after_a_run_takes_the_runs_alpha_not_the_pairs():
    followed = follow.chosen(0.81, 0.36, ISSUE_V, 3, "onnxruntime")
    assert (followed.gamma, round(followed.forecast, 2)) == (1, 1.26)
    advice = follow.advised(followed, 0.96, 3, 1.43)
    assert advice.gamma == best_gamma(0.96, 0.36, follow.MAX_GAMMA, ISSUE_V) == 4 and advice.alpha == 0.96
    assert advice.forecast == pytest.approx(expected_speedup(0.96, 4, 0.36, ISSUE_V)) and advice.forecast > 1.43


def test_no_advice_forecasts_less_than_the_run_measured():
    dearer = follow.chosen(0.81, 0.45, ISSUE_V, 3, "onnxruntime")  # at α 0.96 the best forecast is 1.36×
    assert follow.advised(dearer, 0.96, 3, 1.43) is None  # never γ 1 at 1.18×, nor γ 4 at 1.36×
    assert follow.advised(dearer, 0.96, 3, 1.30).gamma == 4  # below what the formula expects: worth a try
    followed = follow.chosen(0.81, 0.36, ISSUE_V, 3, "onnxruntime")
    assert follow.advised(followed, 0.96, 4, 1.2) is None  # the γ just run is the γ advised
    assert follow.advised(follow.chosen(0.3, 0.9, STEEP, 3, "eager"), 0.3, 3, 0.5) is None  # nothing pays


def test_through_the_compiled_runner_padded_shapes_and_compile_seconds_are_said(loaded):
    """Issue 52, item 7: on the compiled runner, k 5 to 7 run the 8-row step (and 3 the 4-row one): v(k)
    there is the padded step's, and compiling the shapes first takes seconds the message said nothing of.
    The γ line says both (a fresh tiny pair: no shape compiled before)."""
    fresh = PairCache(REGISTRY).get("tiny")
    followed = follow.measure(fresh, TINY, RunConfig(pair="tiny", runner="compiled"))
    assert "v(3) ran the 4-row step; v(5)-v(7) ran the 8-row step, padded" in followed.line()
    assert followed.compile_s > 0 and "compiling its shapes took" in followed.line()
    plain = follow.measure(loaded, TINY, RunConfig(pair="tiny", runner="eager"))
    assert not plain.padded and plain.compile_s == 0 and "padded" not in plain.line()
