"""The compiled runner: the static runner's step compiled once per fixed shape (gpt-fast's recipe).

A step of n new tokens is padded to the next bucket B (1 for a draft step and plain decoding,
then 2, 4, ... for verification and trees); each (B, capacity) gets its own compiled function,
so a shape is compiled once and no step recompiles (dynamo's recompile limit, 8 a function,
never comes into play). A prompt (the first forward after a reset, whatever its length) and any
input longer than the largest bucket run the static step uncompiled: prompts vary run to run, and
a shape compiled for one would cost a compile for a single forward. On a GPU the steps are CUDA
graphs (mode "reduce-overhead"); on a CPU inductor's default code.

Attention reads what is filled, not the capacity: a step reads the span of static.span_of's lattice
(256, 512, ...) holding the entries after it, so its cost follows the run's context (filled.py reads
the keys and values up to it without copies). The span is the length of the step's `reach` input,
marked dynamic, so one compile serves every span at a capacity; a CUDA graph is recorded per span
(cudagraph trees record one per size), and per cache, like a shape (`Steps.recorded`). A step prefers
the shortest span recorded on its cache that holds it, so a span the warm-up left out reads further
rather than records inside a run.

A run's shapes can be compiled ahead of it (`warm`, driven by runners/warmup.py, with progress);
otherwise each compiles on its first call. Either way inductor's on-disk caches sit under the
playground's cache folder (`use_disk_cache`), so a later start of the app compiles faster.

Padding: the pad rows come after the real ones, so causal real rows never see them; each pad row
sees the cached entries and itself (a finite softmax); afterwards the length moves back over them,
which leaves their entries behind the mask like any rejected draft. A chain's step and a tree's send
the same inputs (static.rows_of with the pattern of the new rows), so they share one compiled step.

Outputs: a CUDA graph returns its output in memory the next replay overwrites; so does this runner
on every device (each bucket's output buffer is reused), and the rows handed out are copies.
"""

from __future__ import annotations

import os
import threading
import time
import types

import torch

from playground.config import cache_dir, compiled_refuses
from playground.engine.runners.eager import to_device
from playground.engine.runners.static import (
    MIN_CAPACITY,
    WIDEST_STEP,
    StaticRunner,
    rows_of,
    span_of,
    state_of,
    step,
)

BUCKETS = (1, 2, 4, 8, 16, WIDEST_STEP)  # γ + 1 up to 32 and trees of up to 31 nodes run compiled
# Calls a new shape gets before anything is timed: with mode "reduce-overhead" (CUDA graph trees) a
# function's first call runs its kernels to warm them, the second records the graph, the third replays it
RECORD_CALLS = 3


def bucket(n: int) -> int | None:
    return next((b for b in BUCKETS if b >= n), None)


class CompiledRunner(StaticRunner):
    name = "compiled"

    def __init__(self, model, head=None):
        if getattr(model, "quantization_method", None) == "bitsandbytes":
            raise compiled_refuses("quantization", "nf4" if getattr(model, "is_loaded_in_4bit", False) else "int8")
        super().__init__(model, head)
        self.steps = steps_of(model)
        self.mode = "reduce-overhead" if self.device.type == "cuda" else None

    def forward(self, new: list[int], positions, allowed, keep: int) -> torch.Tensor:
        b = self.shape_for(len(new)) if self.length else None
        if b is None:
            return super().forward(new, positions, allowed, keep)  # a prompt: uncompiled, once per run
        return self.padded(new, positions, allowed, keep, b)

    def padded(self, new: list[int], positions, allowed, keep: int, b: int,
               span: int | None = None) -> torch.Tensor:
        """The step of b rows over `new` (n <= b rows) and b - n pad rows, its attention reading `span`
        entries (None: span_for's).  -> [keep, V]"""
        n = len(new)
        self.reserve(self.length + b)
        span = self.span_for(b) if span is None else span
        rows = to_device(pad(rows_of(new, positions, allowed, self.length, causal=True), b), self.device)
        reach = self.reach(span)
        if self.filled and self.capacity > MIN_CAPACITY:  # a size of its own: one compile serves every span
            torch._dynamo.maybe_mark_dynamic(reach, 0)  # a graph recorded per span; a guard on it no error
        args = (self.model, self.head, self.cache, rows, b, reach)
        key = self.key(b)
        if self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # no graph output is held: the rows below are copies
        out = self.run_step(key, span, args)
        if out is None:  # this shape cannot run compiled here: the same step, uncompiled (StaticRunner's)
            self.set_length(self.length)  # a failed call may have moved the write position in place
            return super().forward(new, positions, allowed, keep)
        if n < b:
            self.set_length(self.length + n)  # back over the pad rows
        else:
            self.length += n  # the step moved every layer's write position past its b rows, all real
        return out[n - keep : n].clone()  # the next step of this shape overwrites `out`

    def run_step(self, key: tuple, span: int, args: tuple) -> torch.Tensor | None:
        """The step of this shape; its first call compiles it (and captures its graph), once for
        all runners of the model, timed: the seconds are kept beside the timings, not inside them.
        None where compiling or capturing this shape failed (now or before, at any shape or span: an op
        it cannot trace, a card running out while it records): the caller runs the step uncompiled."""
        on = (key, span, self.address)
        if key not in self.steps.seconds:
            with self.steps.lock:
                if key in self.steps.failed:
                    return None
                if key not in self.steps.seconds:
                    use_disk_cache()
                    started = time.perf_counter()
                    try:
                        self.steps[key] = compile_step(f"step_{key[0]}x{self.capacity}", self.mode,
                                                       self.device.type != "cuda")
                        out = self.record(key, args)
                    except Exception as e:
                        self.steps.pop(key, None)  # nothing half-made is kept
                        self.fell_back(key, e)
                        return None
                    except BaseException:  # an interrupt: nothing half-made is kept, and it goes on up
                        self.steps.pop(key, None)
                        raise
                    self.steps.seconds[key] = time.perf_counter() - started
                    self.recorded(on)
                    return out
        if on not in self.steps.recorded:  # compiled, but not on this cache or at this span: cudagraph trees
            # record the graph again for a static input at a new address and for a new size of a dynamic one
            # (not a recompile, and not counted as one)
            with self.steps.lock:
                started = time.perf_counter()
                try:
                    out = self.record(key, args) if self.device.type == "cuda" else self.steps[key](*args)
                except Exception as e:  # a card running out while it records: this shape runs uncompiled
                    self.fell_back(key, e)
                    return None
                self.steps.again[on] = time.perf_counter() - started
                self.recorded(on)
                return out
        return self.steps[key](*args)

    @property
    def address(self) -> int:
        """The cache's address, which a CUDA graph records with its static inputs (its first layer's keys)."""
        return self.cache.layers[0].keys.data_ptr()

    def recorded(self, on: tuple) -> None:
        """A shape recorded on a cache (its first calls: compile and capture, or capture again): counted
        where no warm-up asked for it, as a recording inside whatever runs, a timed step perhaps."""
        self.steps.recorded.add(on)
        if not self.steps.warming:
            self.steps.while_running += 1

    def fell_back(self, key: tuple, error: Exception) -> None:
        """A shape that failed to compile or capture: said (Steps.failed, which the page and the benchmark
        show), run uncompiled from now on, and auto's choice of compiled for this model turned to eager
        with the reason, so the next load does not compile again (choice.fell_back)."""
        from playground.engine.runners.choice import fell_back

        first = str(error).splitlines()[0] if str(error) else ""
        self.steps.failed[key] = f"the {key[0]}-row step at capacity {key[1]} raised {type(error).__name__}: {first}"
        fell_back(self.model, key[2], self.steps.failed[key])

    def record(self, key: tuple, args: tuple) -> torch.Tensor:
        """A new step's first RECORD_CALLS calls, on the same inputs: on a GPU its CUDA graph is
        recorded (second call) and replayed once (third) here, inside the seconds kept beside the
        timings, rather than in the first timed step. The calls are one step repeated: each writes
        the same keys and values to the same cache rows once the write position is put back."""
        for _ in range(RECORD_CALLS):
            self.set_length(self.length)  # the step advanced the cache's write position in place
            if self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # each call a step of its own, as in a run
            out = self.steps[key](*args)
        return out

    def shape_for(self, n: int) -> int | None:
        """The smallest shape already compiled that holds n rows, else n's bucket: a short last
        draft (fewer tokens left to make) rides on γ + 1's shape instead of compiling its own."""
        if bucket(n) is None or self.key(bucket(n)) in self.steps.failed:
            return None  # none, or one that failed to compile: uncompiled
        ready = [b for b in BUCKETS if b >= n and self.key(b) in self.steps.seconds]
        return ready[0] if ready else bucket(n)

    def key(self, b: int) -> tuple:
        return step_key(b, self.capacity, getattr(self.head, "rows", None))

    def span_for(self, b: int) -> int:
        """How far the step of b rows after this cache's entries reads: the span holding them
        (static.span_of), or the shortest longer one recorded on this cache where that one is not (its graph
        would record inside the run); the capacity for a model whose attention reads it all."""
        if not self.filled:
            return self.capacity
        need, key, address = span_of(self.length + b, self.capacity), self.key(b), self.address
        ready = [span for k, span, a in self.steps.recorded if k == key and a == address and span >= need]
        return min(ready, default=need)

    @torch.inference_mode()  # as runs call it (CachedModel): with autograd on, tracing needs derivatives quantized kernels lack
    def warm(self, b: int, span: int | None = None) -> float | None:
        """Compile the step of b rows now, at this runner's capacity, on throwaway tokens, and record it on
        this runner's cache reading `span` entries (None: the whole capacity; a warm-up, before anything is
        timed; on a GPU its CUDA graph, see `record`; a shape compiled on another cache or at another span
        is recorded on this one at this span): the seconds its first calls took, or None when this cache
        had it or it failed to compile (then it runs uncompiled: Steps.failed). Leaves the cache empty."""
        span = min(span or self.capacity, self.capacity) if self.filled else self.capacity
        if self.is_warm(b, span):
            return None
        compiled_before = self.key(b) in self.steps.seconds
        self.steps.warming = True
        try:
            self.set_length(span - b)  # entries before the step (stale ones, throwaway): it reads `span`
            self.padded([0] * b, None, None, 1, b, span)
            self.reset()
        finally:
            self.steps.warming = False
        if self.key(b) in self.steps.failed:
            return None
        on = (self.key(b), span, self.address)
        return self.steps.again[on] if compiled_before else self.steps.seconds[self.key(b)]

    def ready_rows(self) -> int:
        """The widest step recorded on this cache at its whole capacity, which serves any length (0: none):
        a drafter that may pass γ (the hybrid) is held to it, so no shape compiles or records its graph
        inside a timed step."""
        return max((b for b in BUCKETS if (self.key(b), self.capacity, self.address) in self.steps.recorded),
                   default=0)

    def is_warm(self, b: int, span: int) -> bool:
        """Whether the step of b rows reading `span` entries needs nothing more on this cache: compiled and
        recorded on it at that span, or failed (it runs uncompiled)."""
        return (self.key(b), span, self.address) in self.steps.recorded or self.key(b) in self.steps.failed


def step_key(b: int, capacity: int, head_rows: int | None) -> tuple:
    """A compiled step's key in Steps: its rows, the cache's capacity, the trimmed head's rows."""
    return (b, capacity, head_rows)  # one trimmed head per row count


def use_disk_cache() -> str:
    """Inductor's on-disk caches (its FX graph and AOT autograd caches, on by default, and on a GPU
    Triton's kernels) in the playground's cache folder rather than the system's temporary one, so
    they outlive a reboot and sit beside the checkpoints; a TORCHINDUCTOR_CACHE_DIR the user set
    wins. Called before the first compile, not at import: it changes the environment. (Importing
    torchao already wrote torch's default folder into the environment, so that one counts as unset.)"""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen is None or os.path.abspath(chosen) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "torchinductor")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def pad(rows: torch.Tensor, b: int) -> torch.Tensor:
    """static.rows_of's [n, 2 + n] -> [b, 2 + b]: pad rows read token 0 at the last position and see,
    of the new entries, only their own; no real row sees them."""
    n = rows.shape[0]
    out = torch.zeros(b, 2 + b, dtype=rows.dtype)
    out[:n, : 2 + n] = rows
    out[n:, 1] = rows[-1, 1]
    pads = torch.arange(n, b)
    out[pads, 2 + pads] = 1
    return out


def compile_step(name: str, mode: str | None, own_buffer: bool):
    """`step` compiled for one shape, under its own code object (dynamo keeps compiled code and
    counts recompiles per code object, so each shape has one entry and none ever recompiles).
    own_buffer: copy the output into a buffer reused by every call, as a CUDA graph's is."""
    code = step.__code__.replace(co_name=name)
    fn = torch.compile(types.FunctionType(code, step.__globals__, name), mode=mode, fullgraph=True, dynamic=False)
    if not own_buffer:
        return fn
    buffer: list[torch.Tensor] = []

    def run(*args):
        out = fn(*args)
        if not buffer:
            buffer.append(torch.empty_like(out))
        return buffer[0].copy_(out)

    return run


class Steps(dict):
    """A model's compiled steps by (rows, capacity, head), and the seconds each one's first call took
    (compile, and capture on a GPU): reported beside per-token timings, never inside them."""

    def __init__(self):
        super().__init__()
        self.seconds: dict[tuple, float] = {}  # set once a shape's first call has finished
        self.failed: dict[tuple, str] = {}  # shapes whose compile or capture raised, with why: run uncompiled
        self.recorded: set[tuple] = set()  # (shape key, span, cache address): once per span and cache
        self.again: dict[tuple, float] = {}  # (shape key, span, cache address) -> seconds its recording took
        self.warming = False  # a warm-up is recording (runs on the model's one thread: model_thread.py)
        self.while_running = 0  # recordings no warm-up asked for: inside a run, perhaps inside its timer
        self.lock = threading.Lock()


def steps_of(model) -> Steps:
    """The model's compiled steps, kept with it: compiled once per shape for the session."""
    state = state_of(model)
    if state.steps is None:
        state.steps = Steps()
    return state.steps
