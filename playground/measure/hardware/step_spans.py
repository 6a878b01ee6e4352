"""The accumulators behind step_profile: perf_counter spans wrapped around named functions of our
plain loop and of onnxruntime-genai's Generator, for one profiled run at a time, and ONNX Runtime's
own per-run times read from its profile file when asked.

Nothing here changes the engine: each `*_patched` context puts the wrappers in place for one run and
takes them away after it, so the benchmark and the page never run through them. A wrapper costs about
a microsecond a call and about ten run per decoded token, against milliseconds a token.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from unittest import mock


class Spans:
    """Seconds spent inside named functions, nested: each name keeps its own time (less the time of
    the wrapped functions it called), so the names add up without counting anything twice. Counting
    starts at the gate's `start_at`-th call (the first decoding step: the step that read the prompt is
    the prefill, which the benchmark's decode tok/s leaves out too)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self.children: list[float] = []  # per open span: the time of the spans opened inside it
        self.on = False
        self.gated = 0  # calls of the gated function so far
        self.run_started: float | None = None  # when the open ONNX Runtime run began (split_forward)

    def wrap(self, name: str, function):
        def timed(*args, **kwargs):
            if not self.on:
                return function(*args, **kwargs)
            self.children.append(0.0)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                self.seconds[name] += spent - self.children.pop()
                self.calls[name] += 1
                if self.children:
                    self.children[-1] += spent
        return timed

    def gate(self, name: str, function, start_at: int = 2):
        """`function` timed as `name`, and counting switched on from its start_at-th call."""
        timed = self.wrap(name, function)

        def gated(*args, **kwargs):
            self.gated += 1
            self.on = self.gated >= start_at
            return timed(*args, **kwargs)
        return gated

    def add(self, name: str, seconds: float, call: bool = True) -> None:
        """Seconds measured some other way (split_forward's), a call counted with them."""
        self.seconds[name] += seconds
        self.calls[name] += call


# -- ours: the engine's plain loop on the onnxruntime runner ---------------------------------------

OURS = {  # row -> what it holds, in the order a step runs them
    "ort_run": "ONNX Runtime's run (session.run_with_iobinding)",
    "runner_bind": "runner before the run: binding made, ids, mask and cache bound",
    "runner_out": "runner after the run: logits out, numpy -> torch, pad of a cut head",
    "cached_model": "cached model: common prefix, rollback, token list",
    "verify": "verify phase: context + drafts list",
    "accept": "accept: greedy_verify's argmax, display_probs' softmax",
    "roll_back": "roll back",
    "describe": "describe: the StepEvent, its one host read",
    "timed_step": "step clock marks, observe, event replace",
    "step": "step(): torch threads set to 1 and back",
    "cut_output": "cut_output: EOS, stop strings, budget",
    "loop": "generate's loop between steps, the caller (rest)",
}


@contextmanager
def ours_patched(spans: Spans):
    """Our loop with a span around each phase of a step, the cached model, the runner and ONNX
    Runtime's run. The step is the gate: counting starts with the second, the first decoding step."""
    from onnxruntime.capi.onnxruntime_inference_collection import Session

    from playground.engine import generate as engine
    from playground.engine.kvcache import CachedModel
    from playground.engine.runners.onnxruntime import OnnxRuntimeRunner

    phases = engine.CHAIN_PHASES
    timed_phases = replace(phases, verify=spans.wrap("verify", phases.verify),
                           accept=spans.wrap("accept", phases.accept),
                           roll_back=spans.wrap("roll_back", phases.roll_back),
                           describe=spans.wrap("describe", phases.describe))
    with ExitStack() as stack:
        for target, name, value in [
            (engine, "step", spans.gate("step", engine.step)),
            (engine, "timed_step", spans.wrap("timed_step", engine.timed_step)),
            (engine, "cut_output", spans.wrap("cut_output", engine.cut_output)),
            (engine, "CHAIN_PHASES", timed_phases),
            (CachedModel, "logits_for", spans.wrap("cached_model", CachedModel.logits_for)),
            (OnnxRuntimeRunner, "forward", split_forward(spans, OnnxRuntimeRunner.forward)),
            (Session, "run_with_iobinding", marked_run(spans, Session.run_with_iobinding)),
        ]:
            stack.enter_context(mock.patch.object(target, name, value))
        yield spans
    spans.on = False


def split_forward(spans: Spans, forward):
    """The runner's forward, its own time split at the run: before it (the binding) and after it."""
    timed = spans.wrap("runner_out", forward)  # its own time; the part before the run moves to runner_bind

    def forward_split(*args, **kwargs):
        started, spans.run_started = time.perf_counter(), None
        try:
            return timed(*args, **kwargs)
        finally:
            if spans.on and spans.run_started is not None:
                spans.add("runner_bind", spans.run_started - started)
                spans.add("runner_out", started - spans.run_started, call=False)
    return forward_split


def marked_run(spans: Spans, run):
    """ONNX Runtime's run, timed, its start kept so the runner's time can be split around it."""
    timed = spans.wrap("ort_run", run)

    def run_marked(*args, **kwargs):
        spans.run_started = time.perf_counter()
        return timed(*args, **kwargs)
    return run_marked


# -- theirs: onnxruntime-genai's own loop (references/onnxruntime_genai.decode) --------------------

THEIRS = {
    "generate_next_token": "generate_next_token: its run, its search, its inputs for the next",
    "get_next_tokens": "get_next_tokens",
    "is_done": "is_done",
    "get_logits": "get_logits",
    "append_tokens": "append_tokens",
    "loop": "the reference's Python loop (rest)",
}
GENERATOR_CALLS = ("append_tokens", "generate_next_token", "get_next_tokens", "is_done", "get_logits")


class TimedGenerator:
    """onnxruntime-genai's Generator with a span around each call its loop makes; generate_next_token
    is the gate (its first call picks the prompt's token, which the prefill already computed)."""

    def __init__(self, spans: Spans, real):
        self.real = real
        for name in GENERATOR_CALLS:
            call = getattr(real, name)
            wrapped = spans.gate(name, call) if name == "generate_next_token" else spans.wrap(name, call)
            setattr(self, name, wrapped)

    def __getattr__(self, name):  # anything else (its speculative stats) as it is
        return getattr(self.real, name)


@contextmanager
def theirs_patched(spans: Spans):
    """onnxruntime-genai's Generator replaced, for the reference's loop only, by the timed one."""
    import onnxruntime_genai as og

    real = og.Generator
    with mock.patch.object(og, "Generator", lambda model, params: TimedGenerator(spans, real(model, params))):
        yield spans
    spans.on = False


# -- ONNX Runtime's own profile (--ort-profile) ----------------------------------------------------


@contextmanager
def ours_profiled(target, folder: Path):
    """Our runner's session made afresh with ONNX Runtime's profiler on, for the runs inside; yields
    a callable giving the profile file once they are done. The sessions it had are put back after."""
    import onnxruntime

    from playground.engine.runners.onnx_build import built_model

    built, real = built_model(target), onnxruntime.SessionOptions

    def profiling_options():
        options = real()
        options.enable_profiling = True
        options.profile_file_prefix = str(folder / "ours")
        return options

    kept, built.sessions = built.sessions, {}
    try:
        with mock.patch.object(onnxruntime, "SessionOptions", profiling_options):
            yield lambda: Path(next(iter(built.sessions.values())).end_profiling())
    finally:
        built.sessions = kept


@contextmanager
def theirs_profiled(folder: Path):
    """onnxruntime-genai's Model made afresh with ONNX Runtime's profiler on (its session option
    enable_profiling) for the runs inside; yields a callable giving the profile file, which ONNX Runtime
    writes when that Model is let go."""
    import gc
    import weakref

    from playground.measure.bench.references import onnxruntime_genai as reference

    real = reference.overlay

    def profiling_overlay(*args):
        text = real(*args)
        text["model"]["decoder"]["session_options"]["enable_profiling"] = str(folder / "theirs")
        return text

    def written() -> Path:
        reference.GENERATORS.clear()
        gc.collect()
        return max(folder.glob("theirs*.json"), key=lambda p: p.stat().st_mtime)

    with mock.patch.object(reference, "overlay", profiling_overlay), \
            mock.patch.object(reference, "GENERATORS", weakref.WeakKeyDictionary()):
        yield written


def session_runs(profile: Path) -> list[float]:
    """Seconds of each of a session's runs (its `model_run` events), in the order they ran."""
    events = json.loads(profile.read_text())
    runs = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "model_run")
    return [dur / 1e6 for _, dur in runs]
