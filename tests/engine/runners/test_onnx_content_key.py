"""One ONNX build per model's bytes (onnx_cache.build_folder, onnx_build.build): a model reached by another
path to the same bytes (an Ollama blob holding a pack's file) finds the build made first, with no builder
run, and the page says whose bytes it shares; other bytes get their own build; the GGUF's SHA-256 comes
from the model's loader where it knows it (an Ollama blob's name: no file is read) and is otherwise made
once and remembered by path, size and mtime (onnx_cache.remembered_sha256), a damaged index ignored.

The builder is replaced by a stand-in that writes the two small files a Built reads: what is under test
is which build each path gets and how often the builder runs, not what it writes (test_gguf_build.py
builds the tiny GGUF for real).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is in requirements.txt")

from playground.engine.runners import choice, onnx_build, onnx_cache  # noqa: E402
from playground.engine.runners.warmup import Building, builds  # noqa: E402
from tiny_gguf import cache, gguf, load  # noqa: E402, F401 (fixtures)

GENAI = {"model": {"decoder": {
    "num_hidden_layers": 1, "num_key_value_heads": 1, "head_size": 4,
    "inputs": {"past_key_names": "past.%d.key", "past_value_names": "past.%d.value"},
    "outputs": {"present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}}}}


@pytest.fixture()
def builder(monkeypatch, tmp_path):
    """Every builder run, by the GGUF it read; the cache a folder of the test's own."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    runs = []

    def build(checkpoint, precision, rows, gguf, work):
        runs.append(gguf)
        (work / "genai_config.json").write_text(json.dumps(GENAI))
        (work / "model.onnx").write_bytes(gguf.read_bytes()[:64])
        return onnx_build.described(checkpoint, precision, rows, gguf, {})

    monkeypatch.setattr(onnx_build, "builder_build", build)
    return runs


@pytest.fixture()
def files(tmp_path):
    """(metadata folder, a pack's GGUF, the same bytes as an Ollama blob, their SHA-256)."""
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "config.json").write_text(json.dumps({"model_type": "qwen2", "tie_word_embeddings": True}))
    (meta / "tokenizer.json").write_text("{}")
    pack = tmp_path / "packs" / "tiny-q4_k_m.gguf"
    pack.parent.mkdir()
    pack.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    sha256 = hashlib.sha256(pack.read_bytes()).hexdigest()
    blob = tmp_path / "ollama" / "models" / "blobs" / f"sha256-{sha256}"
    blob.parent.mkdir(parents=True)
    shutil.copyfile(pack, blob)  # a copy, as Ollama keeps its own: another inode, another mtime
    return meta, pack, blob, sha256


class Files:
    """A model as its loader records it (models/loading.record_gguf): its GGUF, its metadata folder and the
    GGUF's SHA-256 as the loader knows it; in int4, kept as its files (no PyTorch form)."""

    def __init__(self, path, meta, sha256=None):
        import torch

        self.quantization, self.dtype = "int4-cpu", torch.bfloat16
        self.gguf_file, self.metadata_dir = (lambda: path), (lambda: meta)
        if sha256 is not None:
            self.gguf_sha256 = lambda: sha256

    def module(self):  # what makes it a handle (runners.is_handle); a build never asks for it
        raise AssertionError("the build asked for the PyTorch form")


def hashes(monkeypatch) -> list:
    """Every file onnx_cache reads to hash it."""
    read = []
    real = onnx_cache.sha256_of

    def counted(path):
        read.append(path)
        return real(path)

    monkeypatch.setattr(onnx_cache, "sha256_of", counted)
    return read


def test_two_paths_to_the_same_bytes_share_one_build_and_say_so(builder, files, monkeypatch):
    meta, pack, blob, sha256 = files
    first = onnx_build.build(meta, "int4", None, pack)
    assert builder == [pack] and first.seconds > 0 and first.same_as is None
    read = hashes(monkeypatch)
    again = onnx_build.build(meta, "int4", None, blob, sha256)  # the blob's own name gives the digest
    assert builder == [pack] and read == []  # no builder run, and no byte of the blob read
    assert again.folder == first.folder and again.seconds == 0.0
    assert again.same_as == str(pack.resolve())  # what the page says (flow.compile_message)
    assert onnx_build.build(meta, "int4", None, pack).same_as is None  # its own path: nothing to say
    # auto's recorded choice is kept under the build's first name, so it is not measured again
    blob_model, pack_model = Files(blob, meta, sha256), Files(pack, meta)
    assert onnx_build.build_identity(blob_model) == onnx_build.build_identity(pack_model)
    assert choice.key_of(Files(blob, meta, sha256), None, 2) == choice.key_of(Files(pack, meta), None, 2)
    assert "tiny-q4_k_m int4" in choice.key_of(Files(blob, meta, sha256), None, 2)


def test_the_loaders_digest_gives_the_key_the_cache_was_built_under(builder, files):
    """Keys do not change: the digest a loader records is the SHA-256 this cache hashed its builds under
    before, so every build made before is found, with nothing to migrate."""
    meta, pack, blob, sha256 = files
    by_hash = onnx_build.key_of(meta, "int4", None, pack)
    assert onnx_build.key_of(meta, "int4", None, blob, sha256) == by_hash
    assert onnx_build.key_of(meta, "int4", 64, blob, sha256) == onnx_build.key_of(meta, "int4", 64, pack)


def test_other_bytes_get_a_build_of_their_own(builder, files, tmp_path):
    meta, pack, _, _ = files
    first = onnx_build.build(meta, "int4", None, pack)
    other = tmp_path / "lmstudio" / "tiny-q4_k_m.gguf"
    other.parent.mkdir()
    other.write_bytes(pack.read_bytes()[:-1] + b"X")  # one byte differs
    second = onnx_build.build(meta, "int4", None, other)
    assert builder == [pack, other] and second.folder != first.folder and second.same_as is None


def test_a_damaged_build_of_the_same_bytes_is_not_shared(builder, files):
    """Found by its key and checked whole (its marker's files and sizes), as a build of the path's own."""
    meta, pack, blob, sha256 = files
    first = onnx_build.build(meta, "int4", None, pack)
    (first.folder / "model.onnx").write_bytes(b"cut")
    again = onnx_build.build(meta, "int4", None, blob, sha256)
    assert builder == [pack, blob] and again.folder != first.folder and again.seconds > 0


def test_the_page_says_the_build_was_found_and_from_where(builder, files):
    from playground.app.shared.flow import compile_message

    meta, pack, blob, sha256 = files
    onnx_build.build(meta, "int4", None, pack)
    said = [compile_message(event) for event in builds([("target", Files(blob, meta, sha256), None)])]
    assert said[-1] == f"ONNX build found for the target: same bytes as {pack.resolve()}, nothing to build."
    assert compile_message(Building("draft", 1, 1, 0.0)) == "The draft's ONNX model was in the cache."


def test_a_hash_is_made_once_per_path_size_and_mtime(builder, files, monkeypatch):
    meta, pack, _, sha256 = files
    read = hashes(monkeypatch)
    assert onnx_cache.remembered_sha256(pack) == sha256 and read == [pack]
    assert onnx_cache.remembered_sha256(pack) == sha256 and read == [pack]  # remembered: not read again
    os.utime(pack, ns=(10**18, 10**18))
    assert onnx_cache.remembered_sha256(pack) == sha256 and read == [pack, pack]  # touched: hashed again
    pack.write_bytes(pack.read_bytes() + b"more")
    assert onnx_cache.remembered_sha256(pack) == hashlib.sha256(pack.read_bytes()).hexdigest()
    assert read == [pack] * 3  # another size: hashed again, to the new bytes' digest


@pytest.mark.parametrize("damage", ["not json {", "[1, 2]", "entry"])
def test_a_damaged_index_is_ignored_and_written_anew(builder, files, monkeypatch, damage):
    meta, pack, _, sha256 = files
    onnx_cache.remembered_sha256(pack)
    index = onnx_cache.builds_dir() / onnx_cache.HASHES
    if damage == "entry":  # a record whose size and time match, with a digest that is not one
        known = json.loads(index.read_text())
        known[str(pack.resolve())]["sha256"] = "0" * 12
        index.write_text(json.dumps(known))
    else:
        index.write_text(damage)
    read = hashes(monkeypatch)
    assert onnx_cache.remembered_sha256(pack) == sha256 and read == [pack]  # hashed again, never trusted
    assert json.loads(index.read_text())[str(pack.resolve())]["sha256"] == sha256  # and remembered whole
    assert onnx_cache.remembered_sha256(pack) == sha256 and read == [pack]


def test_a_gguf_loaded_from_an_ollama_blob_shares_the_build_of_its_copy(gguf, cache, builder, tmp_path,
                                                                        monkeypatch):
    """Through the loader: the tiny GGUF at a pack-like path and as an Ollama blob named by its digest.
    The blob's handle records that digest (models/loading.record_gguf), so neither the loader nor the
    engine reads it to hash it, and its build is the first path's."""
    from playground.models import checkpoints

    path, _ = gguf
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    blob = tmp_path / "models" / "blobs" / f"sha256-{sha256}"
    blob.parent.mkdir(parents=True)
    shutil.copyfile(path, blob)
    first = onnx_build.built_model(load(path).model)
    read = hashes(monkeypatch)
    monkeypatch.setattr(checkpoints, "hashed", lambda *a: pytest.fail("the loader hashed the blob"))
    handle = load(blob).model
    assert handle.gguf_sha256() == sha256
    again = onnx_build.built_model(handle)
    assert builder == [path] and again.folder == first.folder and again.same_as == str(path.resolve())
    assert [p for p in read if p.resolve() == blob.resolve()] == []
