"""The pair's γ, following this machine: the formula's best γ at the acceptance rate models.yaml
states for the pair (`alpha`) and the draft cost c and verification cost v(k) measured now, through
the runners the run resolves to.

A fixed γ is tuned on one CPU and runner: verifying 4 rows cost 1.6 plain steps on ONNX Runtime on
a Xeon with AMX, 2.6 on 2 AVX2 cores, and under 1.2 on a GPU, so the γ that wins on one loses on
another (docs/benchmarks.md). α is a fact of the two models and the prompts, c and v(k) of the
machine and runner; the formula joins them. The benchmark's default γ and the page's suggestion
follow it; models.yaml's `gamma` runs where nothing is measured (a pair with no `alpha`, another
draft model, a drafter with no model).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from playground.config import MODEL, RunConfig
from playground.engine.estimate import MAX_GAMMA

REPEATS = 3  # timed rounds of the curve (a few seconds on a CPU, once per pair and runner)


@dataclass(frozen=True)
class Followed:
    """The γ a pair's α calls for on this machine, and what it was chosen from."""

    gamma: int
    alpha: float  # the pair's, from models.yaml
    c: float  # a draft step over a plain target step, both as the run runs them
    v: tuple[float, ...]  # the target's v(1..MAX_GAMMA + 1) through its runner
    runner: str  # the target's runner, resolved
    fixed: int  # models.yaml's γ, what runs where nothing is measured
    forecast: float  # the formula's speedup at gamma (1.0 or less: no γ pays here)
    padded: str = ""  # the k whose forward ran a wider compiled step (VerifyCurve.padded), said as such
    compile_s: float = 0.0  # seconds compiling the measured shapes took first (compiled runner), outside the timing
    c_two: float = 0.0  # the draft's step over two rows, as c (0: not timed), what a step reads after all γ were accepted
    context: int = 256  # the context bucket c and v(k) were measured for (runners/choice.bucket_of)

    @property
    def steps(self) -> float | tuple[float, float]:
        """c as the formula reads it (sampling.draft_cost)."""
        return (self.c, self.c_two) if self.c_two else self.c

    def line(self) -> str:
        """One sentence: the γ, and why."""
        shown = ", ".join(f"v({k}) {x:.2f}" for k, x in enumerate(self.v[1:self.gamma + 2], 2))
        why = (f"α {self.alpha:.2f} (models.yaml), {c_text(self.steps)} and {shown} through {self.runner} here")
        if self.padded or self.compile_s:
            why += " (" + "; ".join(filter(None, [self.padded and f"{self.padded}, padded",
                                                  self.compile_s and f"compiling its shapes took {self.compile_s:.0f} s "
                                                                     "first, outside the timing"])) + ")"
        if self.forecast <= 1.0:
            return (f"γ {self.gamma} suits this pair here, though the formula expects no gain at any γ: {why} "
                    f"(forecast {self.forecast:.2f}×)")
        return f"γ {self.gamma} suits this pair here: {why}, a forecast {self.forecast:.2f}× over plain decoding"


def c_text(c) -> str:
    """c as a line says it: one number, or a step over one row and over two (after an all-accepted call)."""
    if isinstance(c, tuple):
        return f"c {c[0]:.2f} ({c[1]:.2f} over the two rows a step reads after all γ were accepted)"
    return f"c {c:.2f}"


def follows(spec, run: RunConfig) -> bool:
    """Whether the pair's α speaks for this run: the pair's own draft model drafting a chain."""
    return spec.alpha is not None and run.drafter == MODEL and run.draft in ("", spec.draft)


def chosen(alpha: float, c, v, fixed: int, runner: str) -> Followed:
    """The best γ (1..MAX_GAMMA) for alpha at c (as sampling.draft_cost reads it) and v; γ 1, the least,
    where none pays."""
    from playground.engine.sampling import best_gamma, expected_speedup  # torch: not at import

    gamma = max(1, best_gamma(alpha, c, MAX_GAMMA, v))
    one, two = c if isinstance(c, tuple) else (c, 0.0)
    return Followed(gamma, alpha, one, tuple(v), runner, fixed, expected_speedup(alpha, gamma, c, v), c_two=two)


def advised(followed: Followed, alpha: float, gamma: int, measured: float) -> Followed | None:
    """After a run at `gamma` that measured acceptance `alpha` and a speedup `measured`: the γ the
    formula calls for at that α (the run's, not models.yaml's: it is what these prompts reached) with the
    c and v(k) the pair's γ was followed from, or None where that is the γ just run or its forecast
    is no more than what the run measured (nor than plain decoding): advice to run a γ expected to be
    slower than what just ran is no advice. Its `alpha` is the run's."""
    best = chosen(alpha, followed.steps, followed.v, followed.fixed, followed.runner)
    if best.gamma == gamma or best.forecast <= max(measured, 1.0):
        return None
    return best


def measure(pair, spec, run: RunConfig, store=None, prompt_tokens: int | None = None) -> Followed:
    """c and v(k) of a loaded pair measured now through the runners `run` resolves to, for its length
    (its new tokens after a prompt of `prompt_tokens`, where known: warmup.run_context), and the γ they
    and the pair's α call for. The draft is timed with its head cut as its drafter runs it. The target's
    curve is kept in `store` (curve_store.CurveStore) where given, for later starts' estimates."""
    from playground.engine.runners import resolve
    from playground.engine.runners.choice import DRAFT, TARGET
    from playground.engine.runners.warmup import run_context
    from playground.measure.bench.verify_cost import measure_curve

    rows, context = run.draft_vocab or None, run_context(run, prompt_tokens)
    target_runner = resolve(run.runner, pair.target.device, False, pair.target.model, None, context, TARGET)
    draft_runner = resolve(run.runner, pair.draft.device, False, pair.draft.model, rows, context, DRAFT)
    target = measure_curve(pair.target.model, MAX_GAMMA + 1, REPEATS, runner=target_runner, context=context)
    if store is not None:
        store.save(target, pair.target, target_runner)
    draft = measure_curve(pair.draft.model, 2, REPEATS, runner=draft_runner, head_rows=rows, context=context)
    return replace(chosen(spec.alpha, draft.c_over(target.step_s), target.v, spec.gamma, target_runner),
                   padded=target.padded(), compile_s=target.compile_s + draft.compile_s, context=target.context)


def followed_plan(plan, pair, spec, say=print, store=None):
    """The benchmark's plan with the pair's γ (taken because --gamma was not given) followed on this
    machine: the runners chosen first (builds, auto's timing: say() hears each), then c and v(k)
    measured, and every cell at the γ they call for. (plan, Followed), or (plan, None) unchanged where
    the pair's α does not speak for the run or γ is swept. The target's curve is kept in `store`, by
    default the cache's (curve_store.CurveStore)."""
    from playground.engine.runners.warmup import choose, run_context
    from playground.measure.bench.sweep import build_text

    base, first = plan.grid.base, plan.cells[0]  # `pair` is loaded as the first cell runs it
    if "gamma" in plan.grid.axes or not follows(spec, base) or not follows(spec, first):
        return plan, None  # a sweep over other drafts: the pair's α speaks for none of them
    for event in choose(pair.target.model, pair.draft.model, first, context=run_context(first, None)):  # auto's
        # choice, at the length measure() follows γ for, decides the runner
        say(build_text(event, "the pair's γ"))
    from playground.measure.bench.curve_store import CurveStore

    followed = measure(pair, spec, first, store if store is not None else CurveStore())
    say(followed.line())
    grid = replace(plan.grid, base=replace(base, gamma=followed.gamma))
    return replace(plan, grid=grid, cells=[replace(c, gamma=followed.gamma) for c in plan.cells]), followed
