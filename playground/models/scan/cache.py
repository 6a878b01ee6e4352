"""The scan's memory: what each model file or folder's metadata said, keyed by its path and stamped with
its size and modification time, so a scan of an unchanged store opens no file. Kept in the playground's
cache (scan.json, written whole), never in a store; beside it, what this machine's loaders take, per
library version (read.Loaders: asking transformers costs seconds).
"""

from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from playground.config import cache_dir, write_text_atomic
from playground.models.scan.read import Loaders

FORMAT = 1  # raised when the fields read change, so an older file's entries are read again


def cache_file() -> Path:
    return cache_dir() / "scan.json"


def versions() -> dict[str, str]:
    found = {}
    for package in ("transformers", "gguf"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "none"
    return found


def stamp(path: Path, fmt: str) -> list:
    """Size and mtime of a GGUF (through links); of every file in a checkpoint folder. Raises OSError
    when the file went away since it was listed."""
    if fmt != "checkpoint":
        stat = os.stat(path)
        return [stat.st_size, stat.st_mtime_ns]
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(path.iterdir()) if p.is_file()]


class ScanCache:
    def __init__(self, path: Path | None = None):
        self.path = Path(path or cache_file())
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        fresh = isinstance(data, dict) and data.get("format") == FORMAT and data.get("versions") == versions()
        self.entries: dict = data.get("entries", {}) if fresh else {}
        self.known: dict = data.get("loaders", {}) if fresh else {}
        self.used: set[str] = set()
        self.changed = not fresh

    def get(self, path: Path, fmt: str, now: list) -> dict | None:
        """The fields read before, if the file's stamp is the same; else None."""
        key = str(path)
        self.used.add(key)
        entry = self.entries.get(key)
        return entry["fields"] if isinstance(entry, dict) and entry.get("stamp") == now else None

    def put(self, path: Path, now: list, fields: dict) -> None:
        self.entries[str(path)] = {"stamp": now, "fields": fields}
        self.used.add(str(path))
        self.changed = True

    def loaders(self, causal: bool) -> Loaders:
        """This machine's loaders, from the file when known for these versions, else asked once."""
        have = self.known
        if have and (have.get("causal_types") or not causal):
            return Loaders(tuple(have["gguf_architectures"]), tuple(have["gguf_types"]), tuple(have["causal_types"]))
        loaders = Loaders.installed(causal)
        self.known = {"gguf_architectures": list(loaders.gguf_architectures), "gguf_types": list(loaders.gguf_types),
                      "causal_types": list(loaders.causal_types)}
        self.changed = True
        return loaders

    def save(self) -> None:
        """Written whole when anything changed; entries of paths gone from disk are dropped."""
        kept = {k: v for k, v in self.entries.items() if k in self.used or os.path.lexists(k)}
        if not self.changed and len(kept) == len(self.entries):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "versions": versions(), "loaders": self.known, "entries": kept}
        write_text_atomic(self.path, json.dumps(data, separators=(",", ":")) + "\n")
        self.entries, self.changed = kept, False
