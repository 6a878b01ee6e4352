"""One long-lived thread for every forward of a model on a GPU: warm-up, race, step-through, lesson,
lab, theory measurement.

torch 2.x keeps a compiled step's state per host thread: inductor's compiled-graph state is a
`threading.local`, and cudagraph trees keep a tree manager and a memory pool per thread
(`torch/_inductor/cudagraph_trees.py`). Gradio runs a handler's steps in whatever worker thread is
free, and a lockstep job (lockstep.py) starts a thread of its own, so each new thread would warm,
record and replay every shape again inside a timed run, and hold another pool. Here each CUDA
device's model work is handed to one thread that lives as long as the app, so a graph recorded
during the warm-up is the one every later run replays. On a CPU nothing is handed over (a forward
has no per-thread state worth keeping there, and torch's thread settings are the caller's), unless
`always` asks for it (the tests, which run on a CPU).

Owned by whoever drives the models (no global): the app's context, one per app; the GPU script
(measure/hardware/gpu_app.py), one per call, so it times the race on the thread arrangement the app has.
It lives in the engine, below both, because the measurement layer cannot import the app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def device_of(pair) -> str:
    """The device a loaded pair's target runs on ("cpu" for a stand-in pair that names none)."""
    return str(getattr(getattr(pair, "target", None), "device", "cpu"))


class ModelThread:
    def __init__(self, always: bool = False):
        self.always = always  # hand over a CPU's work too (tests)
        self.lock = threading.Lock()
        self.pools: dict[str, ThreadPoolExecutor] = {}  # device -> its one thread
        self.idents: set[int] = set()  # the threads' own ids: work handed over from one runs inline

    def wanted(self, device) -> bool:
        """Whether `device`'s work is handed to its thread: a CUDA device's (or any, when `always`)."""
        return self.always or str(device).startswith("cuda")

    def pool(self, device) -> ThreadPoolExecutor:
        key = str(device)
        with self.lock:
            if key not in self.pools:
                self.pools[key] = ThreadPoolExecutor(1, f"model-{key}", initializer=self.named)
            return self.pools[key]

    def named(self) -> None:
        self.idents.add(threading.get_ident())

    def run(self, device, fn: Callable[..., T], *args) -> T:
        """fn(*args) on `device`'s thread (inline where that is not wanted, or already there); its
        result or its exception, as a call would give them."""
        if not self.wanted(device) or threading.get_ident() in self.idents:
            return fn(*args)
        return self.pool(device).submit(fn, *args).result()

    def iterate(self, device, items: Iterator[T]) -> Generator[T, None, object]:
        """`yield from ctx.model_thread.iterate(device, generator)`: each step of the generator run on
        `device`'s thread, its items and return value passed on; closing this closes it there too."""
        if not self.wanted(device):
            return (yield from items)
        try:
            while True:
                try:
                    item = self.run(device, next, items)
                except StopIteration as done:
                    return done.value
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                self.run(device, close)

    def start(self, device) -> Callable[[Callable[[], None]], None]:
        """A starter for lockstep's worker: the work begins on `device`'s thread (a new thread where
        handing over is not wanted), and the caller does not wait for it."""
        def thread(work):
            threading.Thread(target=work, name="lockstep-worker", daemon=True).start()

        if not self.wanted(device) or threading.get_ident() in self.idents:  # there already: it would wait on itself
            return thread
        return lambda work: self.pool(device).submit(work) and None

    def close(self) -> None:
        with self.lock:
            pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
