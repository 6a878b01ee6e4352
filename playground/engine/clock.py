"""The engine's clocks: a step's phases (StepClock) and a wall clock that waits for the device (clock)."""

from __future__ import annotations

import time

import torch


class StepClock:
    """The phases of one step, timed from the clock's creation. On CUDA each mark also records an
    event in the stream, and the events are read once, after the step's last read of a tensor
    (describe's), when every one of them has completed: no mark waits for the device, where a
    synchronize per mark would stall the queue six times a step. Elsewhere the wall clock is exact."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.host: list[float] = []
        self.events: list = []
        self.mark()

    def mark(self) -> None:
        self.host.append(time.perf_counter())
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)

    def seconds(self) -> list[float]:
        """Each mark after the first, then now, in seconds since the first. After the last mark the
        step only describes itself on the host, so that stretch is read on the wall clock."""
        now = time.perf_counter()
        if self.cuda:
            self.events[-1].synchronize()  # already complete: recorded before describe's read
            marks = [self.events[0].elapsed_time(e) / 1000 for e in self.events[1:]]
        else:
            marks = [t - self.host[0] for t in self.host[1:]]
        return marks + [(marks[-1] if marks else 0.0) + now - self.host[-1]]


def clock(device) -> float:
    """Wall clock, after the device has finished its queued work (CUDA runs asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
