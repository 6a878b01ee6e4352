"""What the model cache holds, whether it is intact, and freeing it:

    python -m playground.models cache list            # every entry with its size, and the total
    python -m playground.models cache verify [NAME]   # re-hash every byte; exit status 1 if any is damaged
    python -m playground.models cache clear [NAME]    # remove one entry (or all) and say how much was freed

An entry is a pack's GGUF (packs/NAME.gguf and its marker), a pack's kept partial download
(packs/.NAME.gguf.parts), a converted checkpoint (checkpoints/NAME-<hash>), a GGUF's config and
tokenizer (metadata/NAME-<hash>, what a model kept as its files reads: models/handle.py), an ONNX build of the
onnxruntime runner (onnx/CHECKPOINT-PRECISION[-rowsN]-<key>, checked against the file records its
marker holds: engine/runners/onnx_cache.py) or a temp file a killed run left. NAME is an entry's name,
or a GGUF's name without its hash (matching its checkpoint and that checkpoint's builds too).

A build with a cut head holds hard links of its full build's files: each entry's size counts them,
the total counts each file once, and clearing an entry says what it freed (a linked file's bytes go
with its last name).
"""

from __future__ import annotations

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from playground.models.cachefiles import exclusive, folder_problems, pid_alive, sha256_of, size_of

BUILT_MARKER = "playground-built.json"  # an ONNX build's marker (engine/runners/onnx_cache.MARKER: a sibling layer)


@dataclass
class Entry:
    name: str  # how the user names it on the command line
    kind: str  # GGUF | checkpoint | metadata | ONNX build | partial download | temp
    paths: list[Path]  # what removing it removes

    @property
    def bytes(self) -> int:
        return sum(size_of(p) for p in self.paths)

    def matches(self, name: str) -> bool:
        base = re.sub(r"-[0-9a-f]{12}$", "", self.name)  # a checkpoint named by its GGUF
        of_checkpoint = self.kind == "ONNX build" and self.name.startswith(f"{name}-")  # a build by its checkpoint
        return name in (self.name, base, f"{self.name}.gguf") or of_checkpoint


def entries(root: Path) -> list[Entry]:
    found = []
    packs, checkpoints, builds, metadata = root / "packs", root / "checkpoints", root / "onnx", root / "metadata"
    for gguf in sorted(packs.glob("*.gguf")) if packs.is_dir() else []:
        found.append(Entry(gguf.stem, "GGUF", [gguf, gguf.with_name(gguf.name + ".sha256")]))
    for parts in sorted(packs.glob(".*.parts")) if packs.is_dir() else []:
        found.append(Entry(parts.name[1:].removesuffix(".gguf.parts"), "partial download", [parts]))
    for parent, kind in ((checkpoints, "checkpoint"), (metadata, "metadata"), (builds, "ONNX build")):
        for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
            if folder.is_dir() and not folder.name.startswith("."):
                found.append(Entry(folder.name, kind, [folder]))
    for folder in (packs, checkpoints, metadata, builds):
        temps = [".*.tmp-*", ".*.bad-*", ".building-*"]
        for temp in sorted(t for pattern in temps for t in folder.glob(pattern)) if folder.is_dir() else []:
            found.append(Entry(temp.name, "temp", [temp]))
    return found


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def problems(entry: Entry) -> list[str]:
    """Every byte checked: GGUFs against the catalog (or their marker), checkpoints and metadata folders
    against their manifest."""
    path = entry.paths[0]
    if entry.kind in ("checkpoint", "metadata"):
        return folder_problems(path, full=True)
    if entry.kind == "ONNX build":
        return build_problems(path)
    if entry.kind == "GGUF":
        from playground.models.modelpack import load_catalog, read_marker

        expected = {p.file: p.sha256 for p in load_catalog().values()}.get(path.name)
        expected = expected or (read_marker(path) or {}).get("sha256")
        if expected is None:
            return ["no recorded SHA-256 to check against"]
        return [] if sha256_of(path) == expected else [f"{path.name} does not match its SHA-256"]
    if entry.kind == "partial download":
        bad = []
        for wheel in sorted(path.rglob("*.whl")):
            try:
                with zipfile.ZipFile(wheel) as z:
                    if z.testzip() is not None:
                        bad.append(f"{wheel.name} is damaged")
            except (zipfile.BadZipFile, OSError, EOFError):
                bad.append(f"{wheel.name} is damaged")
        return bad
    pid = re.search(r"\.(?:tmp|bad|building)-(\d+)", path.name)
    return [] if pid and pid_alive(int(pid.group(1))) else ["left by a run that is gone; clear it"]


def build_problems(folder: Path) -> list[str]:
    """Every file an ONNX build's marker records, re-hashed (a folder without one was never finished)."""
    import json

    try:
        files = json.loads((folder / BUILT_MARKER).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"no {BUILT_MARKER} with its files: a half-written build (the next run builds it again)"]
    bad = []
    for name, rec in files.items():
        path = folder / name
        if not path.is_file():
            bad.append(f"{name} is missing")
        elif path.stat().st_size != rec.get("bytes") or sha256_of(path) != rec.get("sha256"):
            bad.append(f"{name} does not match its recorded SHA-256")
    return bad


def chosen(root: Path, name: str | None) -> list[Entry]:
    found = entries(root)
    if name is None:
        return found
    picked = [e for e in found if e.matches(name)]
    if not picked:
        known = ", ".join(e.name for e in found) or "none (the cache is empty)"
        raise ValueError(f"cache entry {name!r} not found in {root.name}; entries: {known}")
    return picked


def files_of(paths: list[Path]) -> list[Path]:
    """The files of these paths (a file, or every file under a folder)."""
    return [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else [])
            if f.is_file()]


def shared_bytes(paths: list[Path]) -> int:
    """Bytes of files with another name too (a cut build's hard links of its full build's weights)."""
    return sum(f.stat().st_size for f in files_of(paths) if f.stat().st_nlink > 1)


def disk_bytes(found: list[Entry]) -> int:
    """What the entries hold on disk: a file with several names counted once."""
    seen = {}
    for f in files_of([p for e in found for p in e.paths]):
        stat = f.stat()
        seen[(stat.st_dev, stat.st_ino)] = stat.st_size
    return sum(seen.values())


def cache_list(root: Path, out) -> int:
    found = entries(root)
    print(f"cache {root}:", file=out)
    for e in found:
        shared = shared_bytes(e.paths)
        note = f"  ({human(shared)} of it shared)" if shared else ""
        print(f"  {e.name:<52} {e.kind:<16} {human(e.bytes):>11}{note}", file=out)
    print(f"  {len(found)} entries, {human(disk_bytes(found))} in all", file=out)
    return 0


def cache_verify(root: Path, name: str | None, out) -> int:
    damaged = 0
    for e in chosen(root, name):
        issues = problems(e)
        damaged += bool(issues)
        print(f"  {e.name:<52} {'ok' if not issues else 'DAMAGED: ' + '; '.join(issues)}", file=out)
    if damaged:
        print(f"{damaged} damaged: the next load rebuilds them, or remove them now with "
              "`python -m playground.models cache clear NAME`", file=out)
    return 1 if damaged else 0


def cache_clear(root: Path, name: str | None, out) -> int:
    """Remove entries, each under its folder's lock so no fetch or conversion is cut in half."""
    freed = 0
    for e in chosen(root, name):
        size = e.bytes - shared_bytes(e.paths)  # a file with another name keeps its bytes
        with exclusive(e.paths[0].parent):
            for path in e.paths:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        freed += size
        print(f"  removed {e.name} ({e.kind}, {human(size)})", file=out)
    for index in (root / "checkpoints" / ".gguf-hashes.json", root / "onnx" / ".hashes.json"):
        if name is None and index.is_file():
            index.unlink()
    print(f"freed {human(freed)}", file=out)
    return 0
