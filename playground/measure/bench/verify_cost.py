"""v(k): what one target forward over k new tokens costs, counted in plain decoding steps.

The paper's speedup formula charges one plain step for verifying γ + 1 tokens. That holds where
the forward waits on reading weights (bf16 on a CPU with AMX, a GPU at batch 1) and fails where it
waits on arithmetic, or where a quantized kernel works on blocks of a few rows: there each extra
row costs. So the cost is measured, on the loaded model: a fixed prefix is cached once, then one
forward over k tokens is timed after it (the cache cropped back each time), k = 1..K, alternating
k within each round so a busy neighbour slows every k alike; v(k) = median(k) / median(1).

Attention over the prefix is part of every forward, so v(k) is measured for a run's context: the
prefix fills half its bucket (runners/choice.bucket_of, timed_fill: 128 entries for a run up to 256,
512 for one up to 1024, ...), as auto's runner choice is timed, and the curve says which bucket.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, replace

from playground.engine.runners.choice import DRAFT, SHORTEST, TARGET, bucket_of, timed_fill

MAX_K = 9  # γ up to 8
REPEATS = 5


@dataclass(frozen=True)
class VerifyCurve:
    """v(1..K) of one model as loaded, with the absolute step it is relative to."""

    v: tuple[float, ...]  # v[k - 1] = cost(k) / cost(1); v[0] == 1
    step_s: float  # median seconds of one forward over 1 token (a plain step)
    key: tuple = ()  # (model, quantization, dtype, device) it was measured for
    rows: tuple[int, ...] = ()  # rows[k - 1]: the rows k's forward ran (a compiled step pads k to its shape)
    compile_s: float = 0.0  # seconds compiling the shapes took in the untimed first round (compiled runner)
    context: int = SHORTEST  # the context bucket it was measured for (runners/choice.bucket_of)

    def padded(self) -> str:
        """The k whose forward ran a wider compiled step, as "v(5)-v(7) ran the 8-row step", or ""."""
        wider = {}
        for k, rows in enumerate(self.rows, 1):
            if rows != k:
                wider.setdefault(rows, []).append(k)
        return "; ".join(f"v({ks[0]})" + (f"-v({ks[-1]})" if len(ks) > 1 else "") + f" ran the {rows}-row step"
                         for rows, ks in wider.items())

    def c_over(self, target_step_s: float) -> float | tuple[float, float]:
        """This draft's cost c against a target's plain step, as sampling.draft_cost reads it: its step over
        one row and over two (what a call's first draft forward reads after an all-accepted call) where
        two rows were timed, else over one."""
        one = self.step_s / target_step_s
        return (one, one * self.v[1]) if len(self.v) > 1 else one

    @property
    def max_gamma(self) -> int:
        """The largest γ whose verification (γ + 1 tokens) was measured."""
        return len(self.v) - 1


def forward_seconds(k: int, prefix: list[int], lm, clock) -> float:
    """Seconds of one forward over k new tokens after `prefix` (already in lm's cache)."""
    from playground.engine.runners.timing import as_in_a_run

    new = [(prefix[i % len(prefix)] + 1) % 1000 for i in range(k)]  # any ids; cost does not depend on them
    started = clock(lm.device)
    with as_in_a_run(lm):  # torch's threads as a run holds them on this runner
        lm.feed(new, k)
    seconds = clock(lm.device) - started
    lm.rollback(len(prefix))
    return seconds


def measure_curve(model, max_k: int = MAX_K, repeats: int = REPEATS, key: tuple = (), clock=None,
                  runner: str = "auto", head_rows: int | None = None, context: int | None = None) -> VerifyCurve:
    """Time one forward over k = 1..max_k tokens after a cached prefix; median of `repeats` rounds
    (after one untimed round: first calls pick kernels, grow the cache and compile a compiled
    runner's shapes). The curve is for a run of `context` entries (None: a short one): the prefix
    fills half its bucket (timed_fill), and under auto the model runs on what was chosen for that
    length. clock(device) -> seconds defaults to the engine's (synchronised on CUDA); tests pass a
    fake one. runner: how the forwards run (engine/runners); head_rows: a draft's
    head cut to its draft vocabulary, as its drafter runs it (and it runs as a draft)."""
    from playground.engine.generate import clock as engine_clock
    from playground.engine.kvcache import CachedModel
    from playground.engine.runners.timing import fitting

    clock = clock or engine_clock
    bucket = bucket_of(context)
    if max_k < 1 or repeats < 1:
        raise ValueError(f"max_k and repeats must be at least 1, got {max_k}, {repeats}")
    lm = CachedModel(model, head_rows=head_rows, runner=runner, role=TARGET if head_rows is None else DRAFT)
    lm.run_on(context)
    prefix_tokens = fitting(model, timed_fill(bucket), max_k)
    vocab = model.config.get_text_config().vocab_size
    prefix = [(i % 1000 + 10) % vocab for i in range(prefix_tokens)]  # any ids the model has
    lm.feed(prefix, 1)
    compiled_before = compile_total(model)
    times: dict[int, list[float]] = {k: [] for k in range(1, max_k + 1)}
    for round_ in range(repeats + 1):
        order = list(range(1, max_k + 1))
        if round_ % 2:
            order.reverse()  # neither end of the range always runs first
        for k in order:
            seconds = forward_seconds(k, prefix, lm, clock)
            if round_:
                times[k].append(seconds)
    medians = [statistics.median(times[k]) for k in range(1, max_k + 1)]
    shape = getattr(lm.runner, "shape_for", None)  # the compiled runner pads k to a compiled shape
    rows = tuple((shape(k) or k) if shape else k for k in range(1, max_k + 1))
    return replace(curve_from_costs(medians, key), rows=rows, compile_s=compile_total(model) - compiled_before,
                   context=bucket)


def compile_total(model) -> float:
    from playground.engine.runners.auto import compile_total as total

    return total(model)


def curve_from_costs(costs: list[float], key: tuple = ()) -> VerifyCurve:
    """cost(1..K) in seconds (or any unit) -> v(k) = cost(k) / cost(1)."""
    if not costs or costs[0] <= 0:
        raise ValueError(f"costs: expected positive seconds for k = 1..K, got {costs!r}")
    return VerifyCurve(tuple(c / costs[0] for c in costs), costs[0], key)


def model_key(loaded) -> tuple:
    """What a curve depends on: the model, how it is quantized, its dtype and device."""
    return (loaded.name, loaded.quantization, loaded.dtype, loaded.device)


def resolved_runner(runner: str, loaded) -> str:
    """The runner a name stands for with this loaded model (auto: the one it resolves to), as kept."""
    from playground.engine.runners import resolve

    return resolve(runner, loaded.device, False, loaded.model)


class VerifyCurves:
    """Curves measured in this session, one per (model, quantization, dtype, device).

    Owned by whoever needs them (a UI tab, a benchmark run), not a module global. runner: how
    every curve of this holder is measured (engine/runners); one holder per runner. store: a
    curve_store.CurveStore each curve measured is kept in, for the estimates of later starts and of
    other models of the same shape; None keeps nothing."""

    def __init__(self, runner: str = "auto", store=None):
        self.runner = runner
        self.store = store
        self.curves: dict[tuple, VerifyCurve] = {}
        self.latest: dict[str, tuple] = {}  # model name -> key of its most recently measured curve
        self.lock = threading.Lock()

    def get(self, key: tuple) -> VerifyCurve | None:
        return self.curves.get(key)

    def for_model(self, name: str) -> VerifyCurve | None:
        """The curve measured last for this model name (as last loaded: quantization, device)."""
        key = self.latest.get(name)
        return None if key is None else self.curves.get(key)

    def measure(self, loaded, max_k: int = MAX_K, repeats: int = REPEATS, context: int | None = None) -> VerifyCurve:
        """The cached curve of a LoadedModel for a run of `context` entries (None: a short one), measured
        now if this session has none long enough."""
        key = (*model_key(loaded), bucket_of(context))
        with self.lock:
            known = self.curves.get(key)
            if known is None or len(known.v) < max_k:
                known = measure_curve(loaded.model, max_k, repeats, key=key, runner=self.runner, context=context)
                self.curves[key] = known
                if self.store is not None:
                    self.store.save(known, loaded, resolved_runner(self.runner, loaded))
            self.latest[loaded.name] = key
            return known
