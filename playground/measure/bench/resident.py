"""Resident memory, measured with psutil: what this process grew by, and what a peer's process holds.

engine/memory.py counts the weights a run holds from its tensors; this reads what the system says the
process holds, which is what a learner's laptop runs out of: the runners' sessions and buffers, the
allocator's free lists, libraries loaded for a model, whatever an earlier pair left behind.

Baseline: the process as it stood just before it loaded its first model (`mark()`, called by the app's
and the bench's pair loading before a load; the first call wins). torch is imported first, since every
load imports it, so the app (which imports torch lazily) and the bench start from the same place;
libraries a load imports later (transformers' model classes, ONNX Runtime) count, as they count in a
peer's growth. Not from before each pair: the pair cache frees the previous pair inside its load, so a
reading taken before that would include the pair about to be freed.

The figure is the end value, read once after a run (no sampler thread, so no peak: the bench report's
`memory.peak_rss_bytes` is the process's high-water mark). One process holds both runs of a race or a
benchmark, so a plain run's figure includes a draft loaded for the speculative one. Other engines'
loops timed in this process (llama.cpp, ONNX Runtime GenAI, OpenVINO) are taken out: each one's growth
at its first call, measured the same way (`first_growth`), is theirs.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable

import psutil

from playground.measure.bench.machine import resident_bytes

BASELINE: int | None = None  # resident bytes before the first model loaded (None: never marked)
LOCK = threading.Lock()
# target -> {(loop, id(draft)): resident bytes its first call added}, freed with the target as the
# loops' own pipelines are: a later cell on the same target finds the loop loaded and its figure here
GROWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def mark(fresh: bool = False) -> None:
    """Take the baseline now, unless one was taken (`fresh`: again, by a caller that knows nothing is loaded)."""
    global BASELINE
    import torch  # noqa: F401  (every load imports it: its libraries are not a model's memory)

    with LOCK:
        if BASELINE is None or fresh:
            BASELINE = resident_bytes()


def grown_bytes() -> int | None:
    """What the process grew by since `mark()`, less other engines' loops loaded in it (None: never
    marked). Clamped at 0: a baseline taken while more was held (a test process) is not a saving."""
    if BASELINE is None:
        return None
    loops = sum(held for by_loop in list(GROWN.values()) for held in by_loop.values())
    return max(resident_bytes() - BASELINE - loops, 0)


def grown_mb() -> float | None:
    held = grown_bytes()
    return None if held is None else held / 2**20


def first_growth(target, key: tuple, call: Callable[[], tuple]) -> tuple[tuple, int]:
    """call()'s result, and the resident memory the loop `key` holds: what its first call added to the
    process. Another engine's loop loads its model then and keeps it, so that is its model and
    buffers as the process sees them, which no tensor count reaches."""
    before = resident_bytes()
    result = call()
    grown = GROWN.setdefault(target, {})
    return result, grown.setdefault(key, max(resident_bytes() - before, 0))


def process_bytes(pid: int) -> int | None:
    """What process `pid` holds now: its proportional set size (a page it shares with another
    process, such as a library, counted in part), or its resident size where the system gives no
    PSS; None once it has ended."""
    try:
        info = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return None
    return getattr(info, "pss", info.rss)
