"""The race's engine work, written once: the Race tab (app/race/frames.py) shows it, and the GPU script
(measure/hardware/gpu_app.py) times it on a card exactly so, which the app's layer is above it to import.

A race runs the plain and the speculative run of one target at once, each in a cache of its own (two
runners on one model take two caches from its pool), after a short untimed run of each: the first
calls of each model pay one-time costs that neither timed run should carry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from playground.engine.events import StepEvent
from playground.engine.generate import SpecConfig, generate
from playground.measure.bench.runs import Setup, warm_up

BASELINE, SPECULATIVE = "autoregressive", "speculative"
SHORT_PROMPT, SHORT_TOKENS = 8, 3  # the short warm-up: the prompt's last tokens, new tokens


def short_warm_up(setup: Setup, ids: list[int], config: SpecConfig) -> None:
    """The benchmark's warm-up, kept short (the last SHORT_PROMPT prompt tokens, SHORT_TOKENS new), once,
    on the runners the run of `ids` steps on (auto chooses per context: runners_for)."""
    warm_up(setup, ids[-SHORT_PROMPT:], replace(config, max_new_tokens=SHORT_TOKENS,
                                                runners_for=config.chosen_for(len(ids))), 1)


def both_runs(target, ids: list[int], config: SpecConfig, drafter, eos) -> Iterator[tuple[str, StepEvent]]:
    """The plain run and the speculative run of `target` on one prompt, stepped in turn (interleave);
    closing this closes both."""
    return interleave({BASELINE: generate(target, ids, config, None, eos_token_ids=eos),
                       SPECULATIVE: generate(target, ids, config, drafter, eos_token_ids=eos)})


def interleave(streams: dict[str, Iterator[StepEvent]]) -> Iterator[tuple[str, StepEvent]]:
    """Yield (name, event) from several event streams, always advancing the one whose clock is
    behind (ties: the first listed). Closing this closes every stream, so a Stop stops work."""
    clocks = {name: 0.0 for name in streams}
    live = dict(streams)
    try:
        while live:
            name = min(live, key=clocks.__getitem__)
            try:
                event = next(live[name])
            except StopIteration:
                del live[name]
                continue
            clocks[name] += event.seconds
            yield name, event
    finally:
        for stream in streams.values():
            stream.close()
