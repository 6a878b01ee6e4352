"""The race: the autoregressive baseline and the speculative run of one prompt, interleaved.

Timing choice. Both runs share this process's CPU (2 cores in CI), so running them in two
threads would make each steal from the other and the measured speedup would mean nothing.
Instead one thread drives both event streams and always advances the run whose own clock
(the summed compute seconds of its events) is behind. A run's clock only moves while it
computes, so the screen replays a fair race on a shared time axis, at about half speed
because the machine does both.

The page itself needs CPU too (the server encodes each frame, the browser draws it). When
torch's threads fill every core, each parallel op of the model stalls whenever the page
draws; the stall is per op, so it hurts the run with more target calls (the baseline) most and
inflates the speedup (measured 1.7x instead of 1.3x on the tiny pair, 2 cores, headless
Chromium). So the race leaves one core to the page while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from playground.config import RunConfig
from playground.measure.bench.divergence import Divergence, found
from playground.measure.bench.race import BASELINE, SPECULATIVE
from playground.app.shared import identity
from playground.app.shared.render import Span, visible
from playground.app.shared.track import RunTrack, new_track

TIMING_NOTE = (
    "Fair timing on a shared CPU: the two runs take turns in one thread (each step goes to the run whose "
    "own compute clock is behind; a clock only runs while its model computes), and one core is left to this "
    "page so drawing "
    "never stalls the models."
)


@dataclass
class RaceFrame:
    """What the page shows at one moment of the race."""

    baseline: RunTrack
    speculative: RunTrack
    settings: RunConfig
    done: bool = False
    compile_s: float = 0.0  # seconds this pair's compiled step shapes took (once, before), outside every timing
    compile_failed: tuple[str, ...] = ()  # step shapes that failed to compile, with why: they run uncompiled
    weights_mb: tuple[float, float] = (0.0, 0.0)  # counted: each run's weights, the drafter's (engine/memory.py)
    # measured: what this process's resident memory grew by since before its first model loaded
    # (measure/bench/resident.py), read with weights_mb; one figure, as one process holds both runs
    resident_mb: float | None = None
    coverage: float | None = None  # a draft with another tokenizer: the share of the target's tokens it can propose
    # greedy texts that differ: the evidence at the first differing token (measure/bench/divergence.py), from
    # untimed reruns once the race is over (`checking` while they run), each token it names as shown
    divergence: Divergence | None = None
    labels: dict[int, str] = field(default_factory=dict)
    precision: str = ""  # how the target computes (app/shared/identity.precision), which the verdict names
    checking: bool = False

    @property
    def spans(self) -> tuple[list[Span], list[Span]]:
        return self.baseline.spans.spans, self.speculative.spans.spans


def race_frames(
    pair,
    prompt: str,
    system: str,
    settings: RunConfig,
    *,
    every: float = 0.15,
    now: Callable[[], float] = time.monotonic,
    stopped: Callable[[], bool] = lambda: False,
    drafter=None,
) -> Iterator[RaceFrame]:
    """Run the race on a loaded pair (loading.LoadedPair), yielding a frame after at least
    `every` seconds of computing since the last one was drawn, and always the last (done=True).
    `stopped()` is asked after each engine step: once true, the race ends there (Stop within one
    step, where Gradio's own cancel would wait for the next frame). `drafter`: one kept across
    runs (the session's, for a drafter that learns); None builds a fresh one from the settings.

    Raises ValueError, naming the field, for bad settings or a prompt that does not fit.
    """
    from playground.engine import factory
    from playground.measure.bench.machine import spare_a_core
    from playground.measure.bench.resident import grown_mb
    from playground.measure.bench.race import both_runs, short_warm_up
    from playground.measure.bench.runs import Setup
    from playground.models.handle import trim_heap
    from playground.engine.generate import check_inputs
    from playground.engine.runners import compile_failures
    from playground.engine.runners.auto import compile_total
    from playground.models.text import encode_prompt

    tokenizer = pair.tokenizer
    config = factory.spec_config(settings)
    ids = encode_prompt(tokenizer, prompt, system=system or None)
    eos = pair.eos
    drafter = drafter or factory.make_drafter(settings, factory.Models.of(pair, settings))
    check_inputs(pair.target.model, ids, config, drafter, tokenizer)  # fail before the page is cleared
    with spare_a_core():
        short_warm_up(Setup.of(pair, settings), ids, config)  # one-time costs neither timed run should carry
        tracks = {name: new_track(name, tokenizer, settings.greedy) for name in (BASELINE, SPECULATIVE)}
        compiled = compiled_models(pair, settings, len(ids))
        frame = RaceFrame(tracks[BASELINE], tracks[SPECULATIVE], settings,
                          compile_s=sum(compile_total(m) for m in compiled),
                          compile_failed=tuple(compile_failures(*compiled)),
                          weights_mb=held_mb(pair.target.model, drafter), resident_mb=grown_mb(),
                          coverage=getattr(drafter, "coverage", None))
        yield frame  # clears the page before the first step
        race = both_runs(pair.target.model, ids, config, drafter, eos)  # the GPU script times this same race
        resumed, wait = now(), every
        try:
            for name, event in race:
                tracks[name].add(event)
                if stopped():
                    break
                if now() - resumed >= wait:
                    shown = now()
                    yield frame
                    resumed = now()
                    # Drawing a frame (render, plots, send) takes wall time, never clock time; keep
                    # it under about a quarter of the wall time however slow the page is to draw.
                    wait = max(every, 3 * (resumed - shown)) if every > 0 else 0.0  # 0: every step
        finally:
            race.close()  # also on Stop: Gradio closes this generator, which closes both engine runs
    trim_heap()  # the runs' freed buffers back to the system (a long prompt's: 160 MB held otherwise)
    frame.weights_mb = held_mb(pair.target.model, drafter)  # now with the caches and tables the run grew
    frame.resident_mb = grown_mb()  # the end value (no sampler thread: not the peak)
    if settings.greedy and not stopped() and frame.baseline.tokens != frame.speculative.tokens:
        frame.checking = True
        yield frame  # the status says why the race has not ended yet
        frame.divergence, frame.labels = evidence(pair, ids, config, settings, frame, stopped)
        frame.precision, frame.checking = identity.precision(pair.target), False
    frame.done = True
    yield frame


def evidence(pair, ids: list[int], config, settings: RunConfig, frame: RaceFrame,
             stopped: Callable[[], bool]) -> tuple[Divergence | None, dict]:
    """The first divergence of a greedy race and its evidence, as the benchmark measures it: both runs
    rerun untimed with detail, on the race's threads (a thread count can round a reduction otherwise),
    a fresh drafter for the speculative one, Stop honoured within a step; and each token it names as
    the page shows it."""
    from playground.engine import factory
    from playground.measure.bench.machine import spare_a_core

    with spare_a_core():
        found_at = found(pair.target.model, ids, config,
                         lambda: factory.make_drafter(settings, factory.Models.of(pair, settings)), pair.eos,
                         (frame.baseline.tokens, frame.speculative.tokens), identity.exact(pair.target), stopped)
    tokens = found_at.tokens if found_at is not None else set()
    return found_at, {t: visible(pair.tokenizer.decode([t], skip_special_tokens=False)) for t in tokens}


def held_mb(target, drafter) -> tuple[float, float]:
    """Megabytes each run holds: the target's weights, and those plus what the drafter keeps."""
    from playground.engine.memory import drafter_bytes, model_bytes

    weights = model_bytes(target)
    return weights / 2**20, (weights + drafter_bytes(drafter)) / 2**20



def compiled_models(pair, settings: RunConfig, prompt_tokens: int) -> list:
    """The race's models that run on the compiled runner, auto's recorded choice for its role and the
    race's length included: resolved without the model, auto read as the table's eager and the compile
    seconds went unsaid (issue 52, item 8)."""
    from playground.engine.runners import COMPILED
    from playground.engine.runners.warmup import DRAFT, TARGET, run_context, runner_of

    context = run_context(settings, prompt_tokens)
    models = [(pair.target.model, TARGET, None)] + ([(pair.draft.model, DRAFT, settings.draft_vocab or None)]
                                                   if pair.draft_loaded else [])
    return [m for m, role, rows in models if runner_of(settings, m, role, rows, context) == COMPILED]
