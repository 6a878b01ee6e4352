"""bench/report.atomic_write: whole files only, the usual mode, and the process umask never touched
(other threads may be creating files at that moment)."""

import os
import threading

import pytest

from playground.measure.bench import report


def umask_now() -> int:
    """The umask, read without setting it (os.umask would)."""
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)


def test_atomic_write_never_sets_the_umask(tmp_path, monkeypatch):
    def forbidden(mask):
        raise AssertionError(f"os.umask({mask:o}) called: other threads would create files with it")

    monkeypatch.setattr(os, "umask", forbidden)
    report.atomic_write(tmp_path / "r.json", "{}\n")
    assert (tmp_path / "r.json").read_text() == "{}\n"
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o666 & ~umask_now()
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    (tmp_path / "r.csv").write_text("old\n")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError, match="No space"):
        report.atomic_write(tmp_path / "r.csv", "new\n")
    assert (tmp_path / "r.csv").read_text() == "old\n" and len(list(tmp_path.iterdir())) == 1


def test_concurrent_atomic_writes_leave_one_whole_file(tmp_path):
    texts = [f"{i}\n" * 10_000 for i in range(8)]
    threads = [threading.Thread(target=report.atomic_write, args=(tmp_path / "r.txt", t)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (tmp_path / "r.txt").read_text() in texts and len(list(tmp_path.iterdir())) == 1
