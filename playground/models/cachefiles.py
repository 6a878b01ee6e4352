"""What every file the cache keeps relies on: atomic writes, content hashes recorded beside the
bytes, one writer at a time, and no temp files left by a process that died.

A verified file or folder carries a record of (bytes, sha256, mtime_ns) for each file. Reuse
compares sizes and mtimes (cheap); any file whose stat changed (written to, truncated, copied
without its times) is hashed again before use, so damaged bytes are never trusted. A full
re-hash of everything is `python -m playground.models cache verify`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

from playground.config import pid_alive, write_text_atomic  # noqa: F401 (their callers import them from here too)

CHUNK = 8 << 20
MANIFEST = ".manifest.json"  # inside a checkpoint folder: every other file's size and sha256


def sha256_of(path: Path, progress=None) -> str:
    """`progress(n)` after each chunk of n bytes, for a bar over a large file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return h.hexdigest()


def record(path: Path, sha256: str | None = None) -> dict:
    """What a later run checks a file against: its size, content hash and mtime."""
    stat = path.stat()
    return {"bytes": stat.st_size, "sha256": sha256 or sha256_of(path), "mtime_ns": stat.st_mtime_ns}


def unchanged(path: Path, rec: dict) -> bool:
    """Same size and mtime as when it was hashed (the cheap check)."""
    stat = path.stat()
    return stat.st_size == rec.get("bytes") and stat.st_mtime_ns == rec.get("mtime_ns")


# ---- checkpoint folders ------------------------------------------------------------------------


def write_manifest(folder: Path) -> None:
    """Record every file of a finished folder (written before the folder gets its final name)."""
    files = {str(p.relative_to(folder)): record(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != MANIFEST}
    write_text_atomic(folder / MANIFEST, json.dumps({"files": files}, indent=1) + "\n")


def folder_problems(folder: Path, full: bool = False) -> list[str]:
    """What is wrong with a recorded folder: missing, truncated or changed files (empty: all good).

    A folder from before manifests existed is adopted: its files are recorded as they are now.
    `full` re-hashes every file; otherwise only files whose size or mtime changed are hashed.
    """
    manifest = folder / MANIFEST
    if not manifest.is_file():
        write_manifest(folder)
        return []
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return [f"{MANIFEST} is unreadable"]
    problems, refreshed = [], False
    for name, rec in files.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != rec["bytes"]:
            problems.append(f"{name} has {path.stat().st_size} bytes, expected {rec['bytes']}")
        elif full or not unchanged(path, rec):
            if sha256_of(path) != rec["sha256"]:
                problems.append(f"{name} does not match its recorded sha256")
            elif not unchanged(path, rec):  # touched or copied, same bytes: remember the new mtime
                files[name], refreshed = record(path, rec["sha256"]), True
    if refreshed and not problems:
        write_text_atomic(manifest, json.dumps({"files": files}, indent=1) + "\n")
    return problems


def replace_folder(tmp: Path, out: Path, is_good) -> None:
    """Rename a finished temp folder to `out`. If another process finished `out` first (a second app,
    the benchmark), keep theirs when `is_good(out)` and drop ours, instead of failing."""
    try:
        os.replace(tmp, out)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR) or not is_good(out):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def discard(path: Path) -> None:
    """Move a damaged file or folder out of the way (rename first, so no reader sees it half-deleted)."""
    if not path.exists():
        return
    aside = path.with_name(f".{path.name}.bad-{os.getpid()}")
    os.replace(path, aside)
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


# ---- one writer at a time, and the leftovers of the dead ---------------------------------------


@contextlib.contextmanager
def exclusive(folder: Path):
    """Hold an exclusive lock (flock on the folder itself, so no lock file is left) across processes:
    a second fetch or conversion waits for the first and then finds it done. The lock dies with its
    process, so a killed run never blocks the next one. Not re-entrant: never nest two on one folder."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the atomic renames still keep files whole
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def remove_stale(folder: Path, prefix: str) -> list[Path]:
    """Remove `prefix`-<pid>[-...] temp files or folders whose process is gone (killed mid-write)."""
    removed = []
    if not folder.is_dir():
        return removed
    for path in folder.glob(f"{prefix}*"):
        pid = path.name[len(prefix):].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
