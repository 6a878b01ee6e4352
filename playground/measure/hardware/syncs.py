"""The host's waits on the device, counted per engine step.

On CUDA: the synchronizing operations that torch's sync debug mode warns of
(`torch.cuda.set_sync_debug_mode("warn")`: `.item()`, `.tolist()`, `.cpu()`, a blocking copy, an `if`
on a tensor, `torch.cuda.synchronize`), each a stall of the host until the GPU catches up. On a
CPU nothing waits, so the reads of a tensor's value on the host are counted instead: on a GPU each
would be one of those waits (the stand-in tests/engine/test_host_reads.py counts with too).

Nothing here imports torch at module level, so `--help` stays light.
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

READS = ("item", "tolist", "__float__", "__int__", "__bool__", "cpu", "numpy")  # a tensor's value on the host


@contextmanager
def counting(device) -> Iterator[Callable[[], int]]:
    """Inside, the yielded function says how many waits there have been so far."""
    import torch

    counter = cuda_syncs if torch.device(device).type == "cuda" else host_reads
    with counter() as count:
        yield count


@contextmanager
def cuda_syncs() -> Iterator[Callable[[], int]]:
    """torch's sync debug mode set to warn, every warning recorded (not only a location's first), and
    the mode put back after."""
    import warnings

    import torch

    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield lambda: sum("synchroniz" in str(w.message) for w in caught)
        finally:
            torch.cuda.set_sync_debug_mode(before)


@contextmanager
def host_reads() -> Iterator[Callable[[], int]]:
    """torch.Tensor's value-reading methods wrapped to count their calls; restored after."""
    import torch

    reads = [0]
    saved = {name: torch.Tensor.__dict__.get(name) for name in READS}

    def wrapped(original):
        def read(tensor, *args, **kwargs):
            reads[0] += 1
            return original(tensor, *args, **kwargs)
        return read

    for name in READS:
        setattr(torch.Tensor, name, wrapped(getattr(torch.Tensor, name)))
    try:
        yield lambda: reads[0]
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(torch.Tensor, name)  # it was inherited (torch._C.TensorBase): inherited again
            else:
                setattr(torch.Tensor, name, original)


def per_step(events: Iterable, count: Callable[[], int]) -> list[int]:
    """Waits between one engine event and the next, for each step after the first (which also reads
    the prompt): the generator runs a step each time it is asked for the next event."""
    counts, last = [], count()
    for _ in events:
        counts.append(count() - last)
        last = count()
    return counts[1:]


def summary(counts: list[int]) -> dict:
    """The median and the most waits a step, over how many steps."""
    if not counts:
        return {"steps": 0}
    return {"median": statistics.median(counts), "max": max(counts), "steps": len(counts)}


def method_waits(target, draft, ids: list[int], run) -> dict:
    """One method's waits per step (a run's RunConfig; `draft` None: plain decoding), after a short run
    of it that is not counted (compiled: its shapes compiled and recorded first)."""
    from dataclasses import replace

    from playground.engine import factory
    from playground.engine.generate import generate

    config = factory.spec_config(run)
    drafter = None if draft is None else factory.make_drafter(run, factory.Models(target, draft))
    list(generate(target, ids, replace(config, max_new_tokens=8), drafter))  # warm: nothing counted
    with counting(target.device) as count:
        counts = per_step(generate(target, ids, config, drafter), count)
    return {**summary(counts), "gamma": run.gamma if draft is not None else 0,
            "counts": "CUDA syncs" if target.device.type == "cuda" else "host reads (CPU stand-in)"}
