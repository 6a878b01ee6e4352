"""Two onnxruntime builds side by side (runners/warmup.builds): where the memory holds both builders'
peaks (warmup.fit_side_by_side) they run at once, each said as it starts and ends; where it does
not, one after the other. Overlap is shown with a barrier both builds must reach, never a clock."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from playground.engine.runners import gguf_builder, onnx_build, warmup

TODO = [("target", "T", None), ("draft", "D", 64)]


@pytest.fixture
def fake_builds(monkeypatch):
    """built_model replaced by a build that waits at a barrier for the other (or alone, with parties 1)."""
    made = []

    def install(parties: int, fits: bool):
        barrier = threading.Barrier(parties, timeout=60)

        def built_model(model, rows=None):
            barrier.wait()  # both builds running at once, or BrokenBarrierError after the timeout
            made.append((model, rows))
            return SimpleNamespace(seconds=1.0, same_as=None)  # what a Built says of itself

        monkeypatch.setattr(onnx_build, "built_model", built_model)
        monkeypatch.setattr(onnx_build, "is_built", lambda model, rows=None: False)
        monkeypatch.setattr(warmup, "fit_side_by_side", lambda models: fits)
        return made

    return install


def test_builds_that_fit_run_at_once_and_each_is_said_as_it_starts_and_ends(fake_builds):
    made = fake_builds(parties=2, fits=True)
    events = list(warmup.builds(TODO))
    assert sorted(made) == [("D", 64), ("T", None)]
    assert [(e.model, e.done) for e in events[:2]] == [("target", False), ("draft", False)]
    assert all(e.beside == 2 for e in events)
    ends = [e for e in events if e.done]
    assert sorted(e.model for e in ends) == ["draft", "target"] and all(e.seconds == 1.0 for e in ends)
    # after the first end, the build still running is said again (the page shows the last line)
    first_end = events.index(ends[0])
    assert not events[first_end + 1].done and events[first_end + 1].model != ends[0].model


def test_builds_that_do_not_fit_run_one_after_the_other(fake_builds):
    made = fake_builds(parties=1, fits=False)
    events = list(warmup.builds(TODO))
    assert made == [("T", None), ("D", 64)]
    assert [(e.model, e.done, e.beside) for e in events] == [
        ("target", False, 1), ("target", True, 1), ("draft", False, 1), ("draft", True, 1)]


def test_a_build_only_fits_beside_another_when_the_memory_holds_both_peaks(monkeypatch, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"\0" * 1000)
    monkeypatch.setattr(onnx_build, "precision_of", lambda model: "int4")
    monkeypatch.setattr(onnx_build, "source_of", lambda model, precision: (tmp_path, model))
    peak = onnx_build.builder_peak(gguf)
    assert peak == int(gguf_builder.PEAK_BASE + gguf_builder.PEAK_PER_BYTE * 1000)
    need = 2 * peak + warmup.BUILD_HEADROOM
    for available, fits in ((need, True), (need - 1, False)):
        monkeypatch.setattr("psutil.virtual_memory", lambda: SimpleNamespace(available=available))
        assert warmup.fit_side_by_side([gguf, gguf]) is fits
    # a model read from a checkpoint (no GGUF): its builder's peak is not estimated, so never side by side
    monkeypatch.setattr("psutil.virtual_memory", lambda: SimpleNamespace(available=10**15))
    assert warmup.fit_side_by_side([gguf, None]) is False
