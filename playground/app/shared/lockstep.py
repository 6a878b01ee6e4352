"""Long model work (a sweep, a losslessness lab) as a generator a Gradio handler can stream and Stop.

The work runs in a worker thread that reports progress through a callback, but the worker only
computes while the handler's generator is being advanced: after each report it waits until the
generator is asked for the next one. So when Gradio cancels the handler (Stop), it finds the
worker parked at a report, not computing; closing the generator tells the worker to raise
`Stopped` there. No work runs on after Stop, and the next queued job gets the CPU to itself,
which honest timings need.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")
Report = Callable[..., None]  # the worker calls report(*anything) to hand progress to the page


class Stopped(Exception):
    """Raised inside the worker at its next report once the handler was closed (Stop)."""


_DONE = object()


def new_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="lockstep-worker", daemon=True).start()


def lockstep(work: Callable[[Report], T], every: float = 0.0, clock=None,
             start: Callable[[Callable[[], None]], None] = new_thread) -> Generator[tuple, None, T]:
    """Run `work(report)` in a thread; yield each report's arguments as a tuple; return its result.

    Use as `result = yield from lockstep(work)`. Exceptions from the work are re-raised here.
    every: least seconds between two reports handed on (the rest are dropped, keeping the page
    from redrawing per draw of a 10,000-draw lab); the first and last reports always pass.
    start: where the work runs (a new thread; a GPU's model thread, model_thread.ModelThread.start).
    """
    import time

    now = clock or time.monotonic
    reports: queue.Queue = queue.Queue()
    resume: queue.Queue = queue.Queue()
    stop = threading.Event()
    outcome: dict[str, Any] = {}
    last = [float("-inf")]

    def report(*args, final: bool = False) -> None:
        if stop.is_set():
            raise Stopped()
        if not final and now() - last[0] < every:
            return
        last[0] = now()
        reports.put(args)
        resume.get()  # park until the handler asks for more (or is closed)
        if stop.is_set():
            raise Stopped()

    def run() -> None:
        try:
            outcome["value"] = work(report)
        except BaseException as e:  # handed to the handler's thread
            outcome["error"] = e
        reports.put(_DONE)

    start(run)
    try:
        while (item := reports.get()) is not _DONE:
            yield item
            resume.put(True)
    finally:
        stop.set()
        resume.put(True)  # wake a parked worker so it raises Stopped and ends
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def streamed(
    work: Callable[[Report], T], show: Callable[..., tuple], every: float = 0.0,
    start: Callable[[Callable[[], None]], None] = new_thread,
) -> Generator[tuple, None, T]:
    """`result = yield from streamed(work, show)`: run work in lockstep, yield show(*report) for each
    report (a handler's outputs), and return the work's result. Closing it stops the work. `start`:
    see lockstep (a model's work passes its device's: `ctx.on_models(pair)`)."""
    runs = lockstep(work, every, start=start)
    try:
        while True:
            try:
                report = next(runs)
            except StopIteration as done:
                return done.value
            yield show(*report)
    finally:
        runs.close()
