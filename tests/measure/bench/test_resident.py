"""Resident memory, measured (measure/bench/resident.py): the figure is the process's growth as the
system reads it, so a buffer allocated after the baseline shows in it; other engines' loops are taken
out; a peer's process is read from its pid; a benchmark record carries it beside the counted weights."""

from __future__ import annotations

import mmap
import subprocess
import sys
import weakref

import numpy as np
import pytest

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.memory import drafter_bytes, model_bytes
from playground.measure.bench import resident
from playground.measure.bench.runs import Setup, measure_prompt
from playground.measure.bench.summary import memory_summary
from playground.models.pair_cache import PairCache
from playground.models.registry import load_registry

MB = 2**20
BUFFER = 256 * MB  # far above what anything else in a test moves between two readings
SHARE = 0.8  # the part of it that must show (pages a collector frees meanwhile may hide some)


def touched(size: int) -> np.ndarray:
    """`size` bytes written, so every page is resident (np.empty's pages would not be), in pages mapped
    for it alone: from the allocator, a buffer freed before (an earlier test's) came back already
    resident once a library loaded earlier in the process (ONNX Runtime's) had it keep freed memory,
    and the process did not grow. Unmapped when the array is let go."""
    pages = mmap.mmap(-1, size)
    array = np.frombuffer(pages, dtype=np.float64)
    array.fill(1.0)
    return array


@pytest.fixture
def baseline(monkeypatch):
    """A baseline taken now, the module's own restored afterwards."""
    monkeypatch.setattr(resident, "BASELINE", None)
    monkeypatch.setattr(resident, "GROWN", weakref.WeakKeyDictionary())
    resident.mark()
    return resident.BASELINE


def test_a_buffer_allocated_after_the_baseline_shows_in_the_growth(baseline):
    before = resident.grown_bytes()
    buffer = touched(BUFFER)
    grown = resident.grown_bytes()
    assert grown - before >= SHARE * BUFFER, (before / MB, grown / MB)
    del buffer
    resident.mark()  # the first baseline stays: a later load does not move it
    assert resident.BASELINE == baseline


def test_no_baseline_no_figure(monkeypatch):
    monkeypatch.setattr(resident, "BASELINE", None)
    assert resident.grown_bytes() is None and resident.grown_mb() is None


def test_other_engines_loops_are_taken_out_of_ours(baseline):
    class Target:  # a model the loops ran on (weakly held, as a real one is)
        pass

    target = Target()
    buffer = None

    def first_call():  # a loop loading its model at its first call
        nonlocal buffer
        buffer = touched(BUFFER)
        return ("tokens",)

    result, held = resident.first_growth(target, ("loop",), first_call)
    assert result == ("tokens",) and held >= SHARE * BUFFER
    assert resident.first_growth(target, ("loop",), lambda: ("again",)) == (("again",), held)  # the first call's
    assert resident.grown_bytes() < SHARE * BUFFER  # its model is its own, not ours
    del target  # the loop freed with its target: its figure goes with it
    assert not list(resident.GROWN.keys())


def test_a_peer_process_is_read_from_its_pid():
    code = ("import sys, numpy as np; a = np.ones(%d // 8); print('ready', flush=True); sys.stdin.read()" % BUFFER)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        held = resident.process_bytes(child.pid)
        assert BUFFER <= held < BUFFER + 200 * MB  # its buffer and a Python with numpy: its own, not ours
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert resident.process_bytes(child.pid) is None  # ended


def test_a_benchmark_record_carries_the_measured_figure_beside_the_counted_weights(baseline):
    pair = PairCache(load_registry()).get("tiny")
    run = RunConfig(pair="tiny", max_new_tokens=8, temperature=0.0)
    setup = Setup.of(pair, run)
    resident.mark(fresh=True)  # after the load: what follows is the buffer and the runs
    buffer = touched(BUFFER)
    record = measure_prompt(setup, pair.tokenizer.encode("def add(a, b):"), factory.spec_config(run), repeats=1)
    weights = model_bytes(pair.target.model)
    assert record["baseline_weights_mb"] == pytest.approx(weights / MB)
    assert record["speculative_weights_mb"] >= record["baseline_weights_mb"]  # the draft's weights and cache
    for name in ("baseline", "speculative"):
        assert record[f"{name}_resident_mb"] >= SHARE * BUFFER / MB, record[f"{name}_resident_mb"]
    summary = memory_summary([record, {**record, "speculative_resident_mb": None}])
    assert summary["speculative_resident_mb"] == record["speculative_resident_mb"]  # None is left out
    assert summary["baseline_weights_mb"] == record["baseline_weights_mb"]
    del buffer


def test_without_a_baseline_a_record_says_not_measured(monkeypatch):
    monkeypatch.setattr(resident, "BASELINE", None)
    pair = PairCache(load_registry()).get("tiny")
    run = RunConfig(pair="tiny", max_new_tokens=4, temperature=0.0)
    record = measure_prompt(Setup.of(pair, run), pair.tokenizer.encode("x ="), factory.spec_config(run), repeats=1)
    assert record["speculative_resident_mb"] is None and record["baseline_resident_mb"] is None
    drafter = factory.make_drafter(run, factory.Models.of(pair, run))
    assert record["speculative_weights_mb"] >= (model_bytes(pair.target.model) + drafter_bytes(drafter)) / MB


def test_a_servers_figure_sums_its_processes_read_from_their_pids():
    """A server (here a Python holding a buffer, with a child holding another) is read as peers are:
    each process of its group from its pid, summed; nothing once it has stopped."""
    import time

    from playground.measure.bench.served.launch import Server

    hold = "import numpy as np, time; a = np.ones(%d // 8); time.sleep(120)" % BUFFER
    parent = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {hold!r}]); exec({hold!r})"
    server = Server([sys.executable, "-c", parent], port=0, name="holder").start()
    try:
        deadline, held = time.monotonic() + 60, 0
        while held < 2 * BUFFER and time.monotonic() < deadline:  # until both have written their buffers
            time.sleep(0.2)
            held = server.resident_bytes()
        assert 2 * BUFFER <= held < 2 * BUFFER + 300 * MB, held / MB
    finally:
        server.stop()
    assert server.resident_bytes() is None
