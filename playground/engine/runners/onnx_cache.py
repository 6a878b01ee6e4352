"""Where the onnxruntime runner's builds live in the cache, what names one, and how one is known whole.

A build is keyed on content: what the builder reads, the precision, the builder's options, the head's
rows, the builder's version and FORMAT. A build from a GGUF reads the file's SHA-256
(remembered by path, size and mtime, as a checkpoint's files are) and the small files of the folder its config and tokenizer come from, never that folder's weights. A
build from a checkpoint reads its files' hashes: a checkpoint the cache converted carries a manifest of
their SHA-256 (models/cachefiles, checked before each load), read as it is; any other (a hub snapshot,
a local folder, an in-process model written out) is hashed file by file, each hash remembered by path,
size and time. So copying or touching a cache or a GGUF keeps every key (no build is redone), and new
bytes get a new build. The GGUF's SHA-256 is the one its loader knows where it knows one (`digest`:
models/loading records it on the model: an Ollama blob's own name, a pack's verified marker, a hash
made once), so a GGUF is hashed once per machine, not once per cache.

One build per content: a folder is named for a reader by the first path its model came from, and a
model reached by another path to the same bytes (a pack's file, then its copy among Ollama's blobs or
LM Studio's models) finds that folder by its key (`build_folder`), so it gets no build of its own; the
page says whose bytes it shares (`same_bytes_as`).

A build is written into `.building-<pid>-…` beside its place and renamed into place when whole; its
marker, written last, records each file's size and SHA-256. A folder without the marker, with
another key, or with a file of another size is never trusted: it is built again.
`python -m playground.models cache list|verify|clear` lists, re-hashes and removes builds
(models/cachetool.py reads the same marker). A killed build's temp folder is removed by the next.

An int4 build with a cut head (a draft vocabulary) is made from the model's full build
(onnx_build.py): its key is the full build's key and the rows (`cut_key`), so new bytes in anything
the full build reads, or a new builder, give the cut a new key too. Its folder holds hard links of
the full build's files (`link_files`: the weights are on disk once) beside its own graph and head,
and is sealed like any build: its marker records every file's SHA-256, the linked ones included.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from playground.config import cache_dir, is_sha256, pid_alive, read_json, write_text_atomic

MARKER = "playground-built.json"  # written last: a folder without it is a half-built model
MANIFEST = ".manifest.json"  # a converted checkpoint's record of its files (models/cachefiles.MANIFEST)
HASHES = ".hashes.json"  # in builds_dir(): remembered SHA-256 of checkpoint files without a manifest
TEMP = ".building-"  # + pid + "-": a build being written (or left by a killed one)
GGUF = "weights.gguf"  # what a GGUF build's key calls its file: the file's own name or place changes no key
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")  # a folder's files a GGUF build does not read
FORMAT = 3  # bumped when what is done to a build changes (onnx_graph.py, the key), so older builds are redone


def builds_dir() -> Path:
    return cache_dir() / "onnx"


def build_key(checkpoint: Path, precision: str, options: dict, rows: int | None,
              gguf: Path | None = None, digest: str | None = None) -> str:
    """The key of a build from `checkpoint`, or from `gguf` with `checkpoint` the folder of its config
    and tokenizer; `digest`: the GGUF's SHA-256 where its loader knows it (else hashed here, once)."""
    if gguf is None:
        return key_of_hashes(checkpoint_hashes(checkpoint), precision, options, rows)
    hashes = {**checkpoint_hashes(checkpoint, weights=False), GGUF: digest or remembered_sha256(gguf)}
    return key_of_hashes(hashes, precision, options, rows)


def cut_key(full_key: str, rows: int) -> str:
    """The key of a head cut to `rows` from the full build keyed `full_key` (which holds the precision,
    the builder's options and version, and what it read)."""
    return key_of_hashes({"full build": full_key}, "cut", {}, rows)


def key_of_hashes(hashes: dict[str, str], precision: str, options: dict, rows: int | None) -> str:
    """What is built from (each file's name -> SHA-256) and how, in one SHA-256."""
    from importlib.metadata import version

    digest = hashlib.sha256()
    digest.update(json.dumps([precision, options, rows, version("onnxruntime-genai"), FORMAT]).encode())
    for name, sha256 in sorted(hashes.items()):
        digest.update(f"{name}:{sha256}\n".encode())
    return digest.hexdigest()


def checkpoint_hashes(checkpoint: Path, weights: bool = True) -> dict[str, str]:
    """Each file of the checkpoint (its name in the folder) -> its SHA-256; without the weight files
    (`weights=False`: what a GGUF build reads of it, its config and tokenizer), which are then not read."""
    manifest = checkpoint / MANIFEST
    if manifest.is_file():  # the load that gave this model checked the files against it
        recorded = {name: rec["sha256"] for name, rec in json.loads(manifest.read_text())["files"].items()}
        return {name: sha256 for name, sha256 in recorded.items() if weights or not name.endswith(WEIGHTS)}
    return {str(p.relative_to(checkpoint)): remembered_sha256(p) for p in sorted(checkpoint.rglob("*"))
            if p.is_file() and (weights or not p.name.endswith(WEIGHTS))}


def remembered_sha256(path: Path) -> str:
    """A file's SHA-256, hashed once per path, size and mtime (a hub snapshot's GBs are read once)."""
    real, index = path.resolve(), builds_dir() / HASHES
    stat = real.stat()
    rec = read_json(index).get(str(real))
    if is_sha256(rec.get("sha256") if isinstance(rec, dict) else None) and \
            (rec.get("bytes"), rec.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
        return rec["sha256"]  # an entry is trusted whole or not at all: a damaged one is hashed again
    sha256 = sha256_of(real)
    index.parent.mkdir(parents=True, exist_ok=True)
    # re-read (another process may have added its own: a lost entry is only hashed again); files gone
    # (an in-process model's temporary checkpoint) are dropped, so the index does not grow without end
    known = {name: rec for name, rec in read_json(index).items() if Path(name).is_file()}
    known[str(real)] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}
    write_text_atomic(index, json.dumps(known, indent=1) + "\n")
    return sha256


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_folder(source: Path, precision: str, rows: int | None, key: str) -> Path:
    """Where the build keyed `key` is: the folder named for `source` (the checkpoint folder or GGUF file
    built from, which names it for a reader) when whole, else a whole one of the same key made from
    another path to the same bytes, else the folder named for `source`, to build in."""
    # an in-process model's checkpoint sits in a fresh temporary folder each load: named by its key alone
    readable = "in-process" if source.name.startswith("checkpoint-") else source.name.removesuffix(".gguf")
    own = builds_dir() / f"{readable}-{precision}{f'-rows{rows}' if rows else ''}-{key[:16]}"
    return own if whole(own, key) else found_build(key) or own


def found_build(key: str) -> Path | None:
    """A whole build keyed `key`, whatever path its model was reached by (the key's first 16 digits end
    every build's name; the marker holds the whole key)."""
    return next((folder for folder in sorted(builds_dir().glob(f"*-{key[:16]}")) if whole(folder, key)), None)


def made_from(folder: Path) -> Path | None:
    """The GGUF file, else the checkpoint folder, a build in the cache was made from (its marker's)."""
    marker = read_json(folder / MARKER)
    source = marker.get("gguf") or marker.get("checkpoint")
    return Path(source) if isinstance(source, str) else None


def same_bytes_as(folder: Path, source: Path) -> str | None:
    """Where the build in `folder` was made from, when that is another path than `source` (to the same
    bytes: the key says so) that still exists; None when it was made from `source` itself. Resolved: an
    Ollama blob is read through a link under a .gguf name (models/gguf_file.named), and said as the blob."""
    made = made_from(folder)
    if made is None or not made.exists() or made.resolve() == source.resolve():
        return None
    return str(made.resolve())


def source_name(folder: Path, default: str) -> str:
    """The name of what the build in `folder` was made from (a GGUF's stem, a checkpoint folder's
    name), which auto's recorded choices are kept under (choice.key_of); `default` where no build is."""
    made = made_from(folder)
    if made is None:
        return default
    return made.stem if made.suffix == ".gguf" else made.name


def whole(folder: Path, key: str) -> bool:
    """Marked with this key, and every file it recorded there with its size (the cheap check)."""
    marker = read_json(folder / MARKER)
    files = marker.get("files")
    return marker.get("key") == key and isinstance(files, dict) and all(
        (folder / name).is_file() and (folder / name).stat().st_size == rec.get("bytes")
        for name, rec in files.items())


def temp_folder(parent: Path) -> Path:
    """A fresh folder to build in, after removing the ones killed builds left."""
    parent.mkdir(parents=True, exist_ok=True)
    for left in parent.glob(f"{TEMP}*"):
        pid = left.name[len(TEMP):].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{TEMP}{os.getpid()}-", dir=parent))


def seal(work: Path, fields: dict) -> None:
    """Write the marker, last: the build's own fields and each file's size and SHA-256."""
    files = {str(p.relative_to(work)): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(work.rglob("*")) if p.is_file() and p.name != MARKER}
    write_text_atomic(work / MARKER, json.dumps({**fields, "files": files}, indent=1) + "\n")


def settle(work: Path, folder: Path, key: str) -> None:
    """Rename the sealed build into place; if another process finished the same build first, keep theirs."""
    if folder.exists() and not whole(folder, key):
        shutil.rmtree(folder, ignore_errors=True)  # half-built or stale: never trusted
    try:
        os.replace(work, folder)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR) or not whole(folder, key):
            raise


def link_files(full: Path, work: Path, but: str) -> None:
    """Every file the full build's marker records, except `but`, into `work` as a hard link: a cut
    build adds only its own files to the disk. The marker lists what was sealed (whole)."""
    for name in read_json(full / MARKER).get("files", {}):
        if name != but:
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            link_or_copy(full / name, work / name)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link, or a copy where the filesystem refuses one (another device, no links, too many).
    Nothing writes a build's file in place (a rebuild renames a new folder in), so a link stays the
    bytes its marker recorded."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
