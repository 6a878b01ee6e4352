"""A GGUF's SHA-256 as the models layer knows it (checkpoints.content_hash), made once per file: from what
already names it (an Ollama blob's name, a pack's verified marker) without reading it, else hashed once
with progress and remembered by path, size and mtime in an index written whole, a damaged index or
entry never trusted; and one folder made from a GGUF per content (checkpoints.same_content): the same
bytes reached by another path find the metadata folder made first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from playground.models import checkpoints, modelpack

BYTES = b"GGUF" + bytes(range(256)) * 40
SHA256 = hashlib.sha256(BYTES).hexdigest()


@pytest.fixture()
def hashed(tmp_path, monkeypatch):
    """Every file content_hash reads to hash it; the cache a folder of the test's own."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    read = []
    real = checkpoints.hashed

    def counted(path, report):
        read.append(path)
        return real(path, report)

    monkeypatch.setattr(checkpoints, "hashed", counted)
    return read


def gguf_at(path, data: bytes = BYTES):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_an_ollama_blob_is_known_by_its_name_without_reading_it(tmp_path, hashed):
    blob = gguf_at(tmp_path / "models" / "blobs" / f"sha256-{SHA256}")
    assert checkpoints.content_hash(blob) == SHA256 and hashed == []
    not_a_blob = gguf_at(tmp_path / "models" / "elsewhere" / f"sha256-{SHA256}")  # not in a store's blobs/
    assert checkpoints.content_hash(not_a_blob) == SHA256 and hashed == [not_a_blob]


def test_a_packs_verified_marker_is_its_hash_while_the_file_is_unchanged(tmp_path, hashed):
    pack = gguf_at(tmp_path / "packs" / "tiny.gguf")
    modelpack.write_marker(pack, SHA256)  # what fetch_pack writes once the bytes matched the catalog
    assert checkpoints.content_hash(pack) == SHA256 and hashed == []
    os.utime(pack, ns=(10**18, 10**18))  # touched since: the marker no longer speaks for it
    assert checkpoints.content_hash(pack) == SHA256 and hashed == [pack]


def test_a_hash_is_made_once_per_path_size_and_mtime_with_progress(tmp_path, hashed):
    path = gguf_at(tmp_path / "lmstudio" / "tiny.gguf")
    said = []
    assert checkpoints.content_hash(path, lambda message, fraction: said.append((message, fraction))) \
        == SHA256
    assert hashed == [path] and said and said[-1][1] == 1.0 and "SHA-256 of tiny.gguf" in said[-1][0]
    assert checkpoints.content_hash(path) == SHA256 and hashed == [path]  # remembered: not read again
    os.utime(path, ns=(10**18, 10**18))
    assert checkpoints.content_hash(path) == SHA256 and hashed == [path, path]  # touched: hashed again
    path.write_bytes(BYTES + b"more")
    assert checkpoints.content_hash(path) == hashlib.sha256(BYTES + b"more").hexdigest()
    assert hashed == [path] * 3  # another size: the new bytes' digest


@pytest.mark.parametrize("damage", ["not json {", "[1, 2]", "entry"])
def test_a_damaged_index_is_ignored_and_written_anew(tmp_path, hashed, damage):
    path = gguf_at(tmp_path / "lmstudio" / "tiny.gguf")
    checkpoints.content_hash(path)
    index = checkpoints.checkpoints_dir() / checkpoints.HASHES
    if damage == "entry":  # size and time match; the digest is not one
        known = json.loads(index.read_text())
        known[str(path.resolve())]["sha256"] = "not a digest"
        index.write_text(json.dumps(known))
    else:
        index.write_text(damage)
    assert checkpoints.content_hash(path) == SHA256 and hashed == [path, path]  # hashed again, never trusted
    assert json.loads(index.read_text())[str(path.resolve())]["sha256"] == SHA256  # and remembered whole
    assert checkpoints.content_hash(path) == SHA256 and hashed == [path, path]


def metadata_writer(monkeypatch) -> list:
    """save_metadata replaced by a writer of a config and a tokenizer, each call counted by its GGUF."""
    made = []

    def save(gguf, out):
        made.append(gguf)
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(checkpoints, "save_metadata", save)
    return made


def test_the_same_bytes_by_another_path_find_the_metadata_made_first(tmp_path, hashed, monkeypatch):
    made = metadata_writer(monkeypatch)
    pack = gguf_at(tmp_path / "packs" / "tiny.gguf")
    blob = tmp_path / "models" / "blobs" / f"sha256-{SHA256}"
    blob.parent.mkdir(parents=True)
    shutil.copyfile(pack, blob)
    first = checkpoints.gguf_metadata(pack, lambda *a: None)
    assert checkpoints.gguf_metadata(blob, lambda *a: None) == first and made == [pack]
    other = gguf_at(tmp_path / "lmstudio" / "tiny.gguf", BYTES + b"other")
    assert checkpoints.gguf_metadata(other, lambda *a: None) != first and made == [pack, other]


def test_a_tokenizer_config_beside_the_gguf_keeps_its_own_metadata_folder(tmp_path, hashed, monkeypatch):
    """transformers reads a tokenizer_config.json beside a GGUF (save_metadata): the same bytes there may
    give another tokenizer, so that GGUF's folder is its own."""
    made = metadata_writer(monkeypatch)
    pack = gguf_at(tmp_path / "packs" / "tiny.gguf")
    beside = gguf_at(tmp_path / "repo" / "tiny-copy.gguf")
    (beside.parent / "tokenizer_config.json").write_text("{}")
    first = checkpoints.gguf_metadata(pack, lambda *a: None)
    assert checkpoints.gguf_metadata(beside, lambda *a: None) != first and made == [pack, beside]
