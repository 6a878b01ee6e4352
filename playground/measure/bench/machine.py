"""What a number was measured on: versions, CPU, threads, device; and peak memory."""

from __future__ import annotations

import os
import platform
import sys
from contextlib import contextmanager

import psutil
import torch


def environment(device) -> dict:
    device = torch.device(device)
    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": package_version("transformers"),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_usable": usable_cores(),
        "torch_threads": torch.get_num_threads(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "load_average_at_start": load_average(),
        "device": str(device),
        "device_name": device_name(device),
    }
    if device.type == "cuda":
        facts["cuda"] = torch.version.cuda
    return facts


def usable_cores() -> int | None:
    """Cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load: above the core count, other processes competed for the CPU."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


BUSY_SHARE = 0.05  # other processes using more than this share of the CPU make timings suspect


def cpu_clock() -> tuple[float, float, float]:
    """(wall seconds, CPU seconds busy on the whole machine, CPU seconds of this process)."""
    import time

    machine = psutil.cpu_times()
    busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    mine = psutil.Process().cpu_times()
    return time.monotonic(), busy, mine.user + mine.system + mine.children_user + mine.children_system


def others_cpu_share(start: tuple, end: tuple, cores: int) -> float:
    """The share of the machine's CPU that other processes used between two cpu_clock() readings.

    Measured, unlike a load average, which also counts this process and lags by a minute."""
    wall = end[0] - start[0]
    others = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, others / (wall * cores)) if wall > 0 else 0.0


def busy_warning(share: float) -> str | None:
    """A warning when other processes competed for the CPU while we measured."""
    if share > BUSY_SHARE:
        return (f"warning: other processes used {share:.0%} of the CPU during the benchmark: "
                "these timings are not results")
    return None


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's marketing name (the one auto's runner choice is recorded under)."""
    from playground.engine.runners.choice import cpu_name

    return cpu_name()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def reset_peak_memory(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device) -> dict:
    """Peak resident memory of this process so far, and on CUDA the peak allocated since the last reset."""
    facts = {"rss_bytes": resident_bytes(), "peak_rss_bytes": peak_rss_bytes()}
    if torch.device(device).type == "cuda":
        facts["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return facts


def resident_bytes() -> int:
    """This process's resident set size now."""
    return psutil.Process().memory_info().rss


def peak_rss_bytes() -> int | None:
    """ru_maxrss: the process's high-water mark (kilobytes on Linux, bytes on macOS)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@contextmanager
def spare_a_core():
    """Run torch on all cores but one (at least one) for the duration, then restore. The app's
    measurements run so: the page keeps a core, so drawing never stalls the models, and every
    measurement set beside another (race, sweep, theory) runs on the same threads."""
    before = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, min(before, cores - 1)))
    try:
        yield
    finally:
        torch.set_num_threads(before)
