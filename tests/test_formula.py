"""One speedup formula and one pooling of α, c and v, in the engine's math, that every caller uses.

Each check swaps a piece of the engine's math for a recognisable stand-in and asks every caller
for its number: a caller with its own copy of the formula, or its own pooling, reports the real
value instead of the stand-in's, and the check fails.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from playground.engine import sampling
from playground.engine.events import (
    ACCEPTED,
    BONUS,
    REJECTED,
    RESAMPLED,
    DraftToken,
    StepEvent,
    Tally,
    pooled,
    summarize,
    tally,
)
from playground.measure.hardware import common
from playground.measure.teach import points
from playground.measure.bench import summary

ROOT = Path(__file__).resolve().parents[1]


def call(drafted: int, accepted: int, draft_s: float, verify_s: float, prompt_tokens: int = 0) -> StepEvent:
    """A hand-made target call: `drafted` tokens, the first `accepted` kept."""
    drafts = tuple(DraftToken(1, 0.5, 0.5, 1.0, None, ACCEPTED if i < accepted else REJECTED) for i in range(drafted))
    return StepEvent(index=0, gamma=drafted, drafts=drafts, n_accepted=accepted, next_token=2,
                     next_fate=BONUS if accepted == drafted else RESAMPLED, next_p=1.0,
                     emitted=(1,) * accepted + (2,), prompt_tokens=prompt_tokens, draft_s=draft_s,
                     verify_s=verify_s, overhead_s=0.0)


def run(*steps) -> list[StepEvent]:
    """A run: its first call also reads a 5-token prompt."""
    first, *rest = steps
    return [call(*first, prompt_tokens=5), *(call(*s) for s in rest)]


SPEC = run((4, 4, 0.5, 1.0), (4, 2, 0.5, 1.0), (4, 1, 0.5, 1.5), (4, 4, 0.5, 1.0))
BASE = run((0, 0, 0.0, 2.0), (0, 0, 0.0, 0.5), (0, 0, 0.0, 0.5), (0, 0, 0.0, 0.5))


def record(speedup: float, accepted: int, verify_seconds: float) -> dict:
    """A bench record (runs.measure_prompt's fields, a tree beside the chain)."""
    return {"category": "x", "speedup": speedup, "new_tokens": 20, "baseline_new_tokens": 20,
            "speculative_seconds": 1.0, "baseline_seconds": speedup, "drafted": 12, "accepted": accepted,
            "tested": 12, "target_calls": 4, "draft_seconds": 1.25, "verify_seconds": verify_seconds,
            "baseline_calls": 20, "baseline_call_seconds": 5.0, "cost_drafted": 10, "cost_calls": 3,
            "cost_baseline_calls": 19, "identical": True, "divergence_margin": None,
            "tree_tok_s": 25.0, "tree_seconds": 0.8, "tree_new_tokens": 20, "tree_speedup": 1.2,
            "tree_over_chain": 1.1, "tree_target_calls": 3, "tree_cost_calls": 2, "tree_nodes": 16,
            "tree_draft_forwards": 6, "tree_draft_seconds": 1.5, "tree_verify_seconds": 2.0,
            "tree_identical": True, "tree_rank_hits": [3, 1], "tree_rank_trials": [4, 4]}


RECORDS = [record(1.5, 9, 1.5), record(2.0, 6, 3.0)]
CURVE = [1.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 1.8, 2.0]


def point(gamma: int, accepted: int, tested: int) -> points.Point:
    return points.Point(pair="tiny", drafter="draft model", temperature=0.0, gamma=gamma, speedup=1.5,
                        accepted=accepted, tested=tested, drafted=10, draft_seconds=1.0, verify_seconds=2.0,
                        target_calls=4, baseline_calls=10, baseline_seconds=5.0)


def stand_in(alpha, gamma, c, v):
    """What the formula gives once expected_tokens_per_call is replaced by 100 + gamma."""
    return (100 + gamma) / (gamma * c + v)


def test_every_prediction_comes_from_the_one_formula(monkeypatch):
    from playground.app.lesson.views import lesson_formula

    monkeypatch.setattr(sampling, "expected_tokens_per_call", lambda alpha, gamma: 100 + gamma)
    m = summarize(SPEC, baseline=BASE)
    assert m.predicted_speedup == pytest.approx(stand_in(m.alpha, m.mean_gamma, m.c, m.predicted_v))
    assert m.paper_speedup == pytest.approx(stand_in(m.alpha, m.mean_gamma, m.c, 1.0))
    s = summary.summarize_records(RECORDS)
    assert s["predicted_speedup"] == pytest.approx(stand_in(s["alpha"], s["mean_gamma"], s["c"], s["verify_cost"]))
    assert s["paper_predicted_speedup"] == pytest.approx(stand_in(s["alpha"], s["mean_gamma"], s["c"], 1.0))
    row = common.pooled_row(RECORDS, CURVE, "hand-made")
    assert row["predicted_chain_speedup"] == pytest.approx(stand_in(row["alpha"], row["mean_gamma"], row["c"],
                                                                    row["v_chain"]))
    assert lesson_formula(0.7, 4, 0.1, 1.3) == pytest.approx(stand_in(0.7, 4, 0.1, 1.3))
    assert sampling.sloped_speedup(0.7, 4, 0.1, 0.05) == pytest.approx(stand_in(0.7, 4, 0.1, 1.2))
    # 100 + γ tokens a call barely grow with γ: the stand-in's best lookahead is not to speculate
    # (the real formula's, at α = 0.7 and c = 0.1, is 4)
    assert sampling.best_gamma(0.7, 0.1, 8) == 0


def test_the_formula_is_the_papers_with_v():
    assert sampling.expected_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8**5) / (0.2 * 1.4))
    # v as a number is v(γ + 1) itself; as a curve it is read at γ + 1
    assert sampling.expected_speedup(0.8, 4, 0.1, 1.3) == pytest.approx((1 - 0.8**5) / (0.2 * 1.7))
    assert sampling.expected_speedup(0.8, 4, 0.1, CURVE) == sampling.expected_speedup(0.8, 4, 0.1, CURVE[4])


def test_every_pooling_of_alpha_c_and_v_is_the_engines(monkeypatch):
    monkeypatch.setattr(Tally, "alpha", property(lambda t: 0.25))
    monkeypatch.setattr(Tally, "c", property(lambda t: 0.125))
    monkeypatch.setattr(Tally, "verify_cost", property(lambda t: 1.5))
    m = summarize(SPEC, baseline=BASE)
    assert (m.alpha, m.c, m.verify_cost) == (0.25, 0.125, 1.5)
    s = summary.summarize_records(RECORDS)
    assert (s["alpha"], s["c"], s["verify_cost"]) == (0.25, 0.125, 1.5)
    assert (s["tree_c_depth"], s["tree_verify_cost"]) == (0.125, 1.5)
    pool = points.pool([point(4, 6, 8), point(2, 1, 4)])
    assert (pool.alpha, pool.c) == (0.25, 0.125)
    assert (point(4, 6, 8).alpha, point(4, 6, 8).c, point(4, 6, 8).verify_cost) == (0.25, 0.125, 1.5)
    row = common.pooled_row(RECORDS, CURVE, "hand-made")
    assert (row["alpha"], row["c"], row["verify_chain"], row["tree_c_per_depth"]) == (0.25, 0.125, 1.5, 0.125)


def test_pooling_adds_raw_sums_before_dividing():
    first, second = SPEC[:2], SPEC[2:]  # two runs of one prompt: each has its own prompt call
    second = [call(4, 1, 0.5, 1.5, prompt_tokens=5), *second[1:]]
    both = pooled([tally(first, BASE[:2]), tally(second, BASE[2:])])
    assert both.alpha == (4 + 2 + 1 + 4) / (4 + 3 + 2 + 4)  # Σ accepted / Σ tested, not a mean of ratios
    assert both.c == pytest.approx((0.5 / 4) / 0.5) and both.verify_cost == pytest.approx(1.0 / 0.5)
    assert tally(SPEC).verify_cost is None and tally(SPEC).c == pytest.approx((1.5 / 12) / (3.5 / 3))
    m = summarize(SPEC, baseline=BASE)
    t = tally(SPEC, BASE)
    assert (m.alpha, m.c, m.verify_cost, m.target_step_s) == (t.alpha, t.c, t.verify_cost, t.target_step_s)


def test_a_pooled_summary_and_its_points_agree():
    """The bench's summary of records and the theory view's pool of the same records give one α and c."""
    s = summary.summarize_records(RECORDS)
    setting = points.Setting(pair="tiny", drafter="draft model", temperature=0.0, gamma=3, source="sweep")
    pool = points.pool([points.point_from_record(r, setting) for r in RECORDS])
    assert (pool.alpha, pool.c) == (pytest.approx(s["alpha"]), pytest.approx(s["c"]))


MINE = ("engine/", "measure/bench/summary.py", "measure/hardware/common.py", "measure/bench/profile.py", "measure/teach/points.py")


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="the duplicates command is not installed")
def test_the_engine_and_its_measurement_repeat_no_code():
    out = subprocess.run(["duplicates", "--repo", str(ROOT / "playground"), "--most", "200"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("D") and "boilerplate" not in line]
    assert [r for r in rows if any(f" {m}" in r or f"~ {m}" in r for m in MINE)] == [], out
