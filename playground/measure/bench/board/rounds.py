"""The drafts board's two rounds: each entry at its best γ for this machine.

The probe drafts PROBE_GAMMA tokens (a tree PROBE_GAMMA levels). Greedy, a shorter chain is the
longer one's prefix, so the probe's per-position counts say what every shorter chain would have
kept; with the entry's c and the target's v(k) measured through the same runner, the formula names
the best γ (best_gamma). The second round measures each chain whose best γ is shorter at that γ,
and the board shows each entry's last measurement. Trees stay at the probe's depth (their width is
the runner's budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from playground.config import CHAIN, RunConfig
from playground.measure.bench.board.lineup import PROBE_GAMMA
from playground.measure.bench.sweep import Plan, Progress, measure


def forecast(records: list[dict], c: float, v, gamma: int) -> float:
    """The formula's speedup had the probe's chains been cut to γ tokens, from its per-position
    counts: tokens per call 1 + Σ_{i<γ} accepted_i / calls, drafting c per drafted token, verifying
    v(1 + drafted per call). v: the target's v(1), v(2), ... through the run's runner."""
    from playground.engine.sampling import verify_cost  # torch: not at import (the CLI's --help stays light)

    calls = sum(r["target_calls"] for r in records)
    if not calls:
        return 1.0
    accepted = sum(sum(r["position_accepted"][:gamma]) for r in records) / calls
    drafted = sum(sum(r["position_drafted"][:gamma]) for r in records) / calls
    return (1 + accepted) / (c * drafted + verify_cost(v, 1 + drafted))


def best_gamma(run: dict, v) -> tuple[int, dict[int, float]]:
    """The γ (1..PROBE_GAMMA) the formula favours for a probe run, and its forecast at each γ."""
    c = run["summary"].get("c", 0.0)
    gammas = range(1, min(PROBE_GAMMA, len(v) - 1) + 1)
    forecasts = {g: forecast(run["prompts"], c, v, g) for g in gammas}
    return max(forecasts, key=lambda g: (forecasts[g], -g)), forecasts


Curve = Callable[[object, str], tuple[float, ...]]  # (a loaded pair, its runner) -> the target's v(1..K)


def rounds(plan: Plan, pair_of, progress, names: list[str], curve_of: Curve,
           stopped: Callable[[], bool] | None = None) -> list[dict]:
    """The probe, then each chain re-measured at its best γ where that is shorter; every run marked
    with its entry (`board`: name, round, the γ chosen, the forecasts, the v(k) it used)."""
    curves: dict[str, tuple[float, ...]] = {}

    def v_of(run: dict, cell: RunConfig) -> tuple[float, ...]:
        if run["runner"] not in curves:
            curves[run["runner"]] = tuple(curve_of(pair_of(cell), run["runner"]))
        return curves[run["runner"]]

    def marked(cells: list[RunConfig], labels: list[str], round_: int, report):
        def hear(step: Progress) -> None:  # a run names its entry as soon as it is measured
            if step.run is not None:
                step.run["board"] = {"entry": labels[cells.index(step.cell)], "round": round_}
            report(step)
        return hear

    # reference engines' own plain loops (--reference) are timed once, beside the first entry: they
    # name the fastest plain decoding, and timing them beside every entry would double the board
    first, rest = replace(plan, cells=plan.cells[:1]), replace(plan, cells=plan.cells[1:], reference=False,
                                                                llamacpp=False, ortgenai=False)
    total = first.total_runs + rest.total_runs

    def of_all(step: Progress) -> None:
        progress(replace(step, total=total))

    probes = measure(first, pair_of, marked(plan.cells, names, 1, of_all), stopped)
    probes += measure(rest, pair_of, marked(plan.cells, names, 1, of_all), stopped, done=first.total_runs)
    again, marks = [], []
    for name, cell, run in zip(names, plan.cells, probes):
        if not run["prompts"]:
            marks.append({"entry": name, "round": 1})
            continue
        v = v_of(run, cell)
        chosen, forecasts = best_gamma(run, v) if cell.speculation == CHAIN else (PROBE_GAMMA, {})
        marks.append({"entry": name, "round": 1, "best_gamma": chosen, "v": list(v),
                      "forecast": {str(g): f for g, f in forecasts.items()}})
        if chosen != cell.gamma:
            again.append((name, replace(cell, gamma=chosen), marks[-1]))
    for run, mark in zip(probes, marks):
        run["board"] = mark
    if not again:
        return probes
    second = Plan(plan.grid, [cell for _, cell, _ in again], plan.prompts, repeats=plan.repeats,
                  warmup=plan.warmup, command=plan.command)
    done = total

    def onward(step: Progress) -> None:  # the total grows by the second round's runs
        progress(replace(step, total=total + second.total_runs))

    remeasured = measure(second, pair_of, marked(second.cells, [n for n, _, _ in again], 2, onward), stopped,
                         done=done)
    for (name, cell, mark), run in zip(again, remeasured):
        run["board"] = {**mark, "round": 2}
    return probes + remeasured
