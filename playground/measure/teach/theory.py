"""Measuring one point for the theory view: a warm-up, then baseline and speculative runs alternated
(the bench's own measure_prompt), with a token tree from the same draft beside the chain; and the
points of one pair, drafter and temperature pooled into the α and c the formula is fed.

The Theory and Lesson tabs both measure through this module, so neither reaches into the other;
so do the per-runner costs, c and v(k) of a pair through each runner, that they and the race's tree
forecast read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from playground.config import MODEL, RunConfig
from playground.measure.teach.points import Point, Pooled, Setting, point_from_record, pool
from playground.measure.bench.verify_cost import VerifyCurve, VerifyCurves


def measure_point(
    pair, ids: list[int], settings: RunConfig, repeats: int, report, source: str, prompt: str
) -> Point:
    """Warm up, then time baseline and speculative runs alternated (bench.measure), as one point.

    report(done, total, what) is called after each run (the lockstep worker's callback)."""
    return measured(pair, ids, settings, repeats, report, source, prompt)[0]


def measured(
    pair, ids: list[int], settings: RunConfig, repeats: int, report, source: str, prompt: str
) -> tuple[Point, dict]:
    """measure_point's point, and the bench record it was made of (greedy: `identical`, whether the
    speculative run reproduced the plain one token for token)."""
    from playground.engine import factory
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.bench.runs import Setup, measure_prompt, warm_up

    config = factory.spec_config(settings)
    # a tree's length beside the chain's, where the draft can grow one (one of another tokenizer drafts chains)
    setup = Setup.of(pair, settings, tree=settings.drafter == MODEL and pair.same_tokenizer)
    total = len(setup.methods(config)) * repeats + 1  # a tree on another runner brings a plain run of its own
    with spare_a_core():  # as in the race: the page keeps a core, so drawing never stalls the models
        warm_up(setup, ids, config, 1)
        report(1, total, "warm-up")
        record = measure_prompt(
            setup, ids, config, repeats, lambda method, done, _: report(1 + done, total, method)
        )
    setting = Setting(settings.pair, settings.drafter, settings.temperature, settings.gamma, source, prompt,
                      settings.draft)
    shape = (settings.tree_budget, settings.tree_depth, settings.tree_branching, settings.tree_width)
    return point_from_record(record, setting, shape), record


def matching(points: list[Point], pair: str, drafter: str, temperature: float, draft: str = "") -> list[Point]:
    """The points of this pair, drafter, draft model and temperature: α depends on all four, c on all
    but the temperature."""
    return [p for p in points if p.pair == pair and p.drafter == drafter and p.draft == (draft or "")
            and p.temperature == float(temperature)]


def pooled_for(
    points: list[Point], pair: str, drafter: str, temperature: float, draft: str = ""
) -> tuple[list[Point], Pooled | None]:
    """The matching points and their pooled α, c and v (None without a measured draft)."""
    chosen = matching(points, pair, drafter, temperature, draft)
    return chosen, pool(chosen)


# -- c and v(k) per runner ----------------------------------------------------------------------

TREE_K = 33  # the longest curve a tree forecast measures: a 32-node tree (a few forwards more a round)


@dataclass(frozen=True)
class RunnerCost:
    """c and v(k) of one loaded pair through one runner, as measured on this machine."""

    runner: str  # the runner as resolved on the device (auto is what it stands for there)
    target: VerifyCurve  # the target's v(k) and plain step
    draft: VerifyCurve  # the draft's: its plain step is the draft step

    @property
    def c(self) -> float:
        """One draft step ÷ one plain target step, both through this runner."""
        return self.draft.step_s / self.target.step_s

    @property
    def steps(self) -> float | tuple[float, float]:
        """c as the formula reads it (sampling.draft_cost): over one row and over the two a step reads after
        an all-accepted call, where the draft's curve has two rows; else c."""
        return self.draft.c_over(self.target.step_s)

    def speedup(self, alpha: float, gamma: int) -> float:
        """The speedup formula (engine/sampling) at this runner's c (one row and two) and measured v(γ + 1)."""
        from playground.engine.sampling import expected_speedup

        return expected_speedup(alpha, gamma, self.steps, self.target.v)


class RunnerCosts:
    """v(k) of each loaded model per runner, measured once per app run (a fact of the machine, the
    model as loaded and the runner), so every tab and session reads the same curves: the Theory
    tab's, the Lesson's and the race's tree forecast. Owned by the app's context, not a global.
    Each curve measured is also kept on disk (`store`, measure/bench/curve_store.py), so a later start
    estimates any model of the same shape with it (`stored`)."""

    def __init__(self, store=None):
        from playground.measure.bench.curve_store import CurveStore

        self.store = store if store is not None else CurveStore()
        self.holders: dict[str, VerifyCurves] = {}  # resolved runner -> its curves
        self.lock = threading.Lock()

    def curves(self, runner: str) -> VerifyCurves:
        with self.lock:
            return self.holders.setdefault(runner, VerifyCurves(runner, self.store))

    def stored(self, shape, device: str, quantization: str | None = None, runner: str | None = None):
        """The curve kept on this machine for a model of `shape` (models/shape.py) on `device`, at
        `quantization` and through `runner` where given: a curve_store.Stored, or None."""
        return self.store.find(shape, device, quantization, runner)

    def measure(self, loaded, runner: str, max_k: int, repeats: int = 3) -> VerifyCurve:
        """One model's curve through `runner`, measured now unless this app run has one long enough."""
        return self.curves(resolved(runner, loaded)).measure(loaded, max_k=max_k, repeats=repeats)

    def cost(self, pair, runner: str, max_k: int, repeats: int = 3, tree: bool = False) -> RunnerCost:
        """c and v(k) of a loaded pair through `runner`: the target to k = max_k, the draft to two rows
        (its plain step is all c needs). `tree`: for a tree run, which auto may run elsewhere."""
        name = resolved(runner, pair.target, tree)
        return RunnerCost(name, self.measure(pair.target, name, max_k, repeats),
                          self.measure(pair.draft, name, 2, repeats))

    def known(self, target: str, draft: str) -> dict[str, RunnerCost]:
        """This app run's costs of a pair by model names, per runner that has measured both models."""
        with self.lock:
            holders = dict(self.holders)
        found = {}
        for runner, holder in holders.items():
            t, d = holder.for_model(target), holder.for_model(draft)
            if t is not None and d is not None:
                found[runner] = RunnerCost(runner, t, d)
        return found

    def target_curve(self, target: str, runner: str | None = None) -> VerifyCurve | None:
        """The target's curve through `runner` (resolved), or through any runner when None: the longest."""
        with self.lock:
            holders = dict(self.holders)
        if runner is not None:
            holder = holders.get(runner)
            return None if holder is None else holder.for_model(target)
        found = [c for h in holders.values() if (c := h.for_model(target)) is not None]
        return max(found, key=lambda c: len(c.v), default=None)

    def tree_check(self, pair, settings: RunConfig) -> tuple[VerifyCurve | None, float | None]:
        """What a tree race's forecast reads: the target's curve through the race's runner to the
        tree's nodes + 1 (at most TREE_K) and c of the chain's one-row draft step, each measured now
        unless this app run has it. (None, None) for a tree past TREE_K nodes."""
        k = settings.tree_budget + 1
        if k > TREE_K:
            return None, None
        cost = self.cost(pair, settings.runner, max(k, settings.gamma + 1), repeats=2, tree=True)
        return cost.target, cost.c


def resolved(runner: str, loaded, tree: bool = False) -> str:
    """The runner a name stands for with this loaded model (auto: what measured fastest on its device,
    where that runner can serve the model and the run)."""
    from playground.engine.runners import resolve

    return resolve(runner, loaded.device, tree, loaded.model)
