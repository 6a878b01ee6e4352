"""The GGUF header reader (models/scan/gguf_header.py) against gguf's own GGUFReader on the same files, and
the facts the scan takes from a header (models/scan/read.py): parameters, file type, context, the real
vocabulary size and the tokenizer fingerprint, padded or not."""

from __future__ import annotations

import gguf
import pytest
from stores import vocabulary, write_gguf

from playground.models.scan import gguf_header, read, vocab


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {
        "plain": write_gguf(root / "plain.gguf"),
        "padded": write_gguf(root / "padded.gguf", tokens=vocabulary(pad_to=256 + 64)),
        "other": write_gguf(root / "other.gguf", arch="llama", tokens=vocabulary(prefix="▁")),
    }


def test_the_header_reads_as_ggufs_own_reader_reads_it(files):
    for path in files.values():
        ours, theirs = gguf_header.read_header(path), gguf.GGUFReader(path)
        assert set(ours.metadata) == {k for k in theirs.fields if not k.startswith("GGUF.")}
        assert ours.get("tokenizer.ggml.tokens") == [str(bytes(theirs.fields["tokenizer.ggml.tokens"].parts[i]),
                                                         "utf-8") for i in theirs.fields["tokenizer.ggml.tokens"].data]
        assert [(t.name, t.shape, t.type) for t in ours.tensors] == \
            [(t.name, tuple(int(n) for n in t.shape), int(t.tensor_type)) for t in theirs.tensors]
        assert ours.data_start == theirs.data_offset
        assert gguf_header.missing_bytes(ours, path.stat().st_size) == 0


def test_the_facts_of_a_header(files):
    fields = read.read_gguf(files["plain"])
    tokens = vocabulary()
    assert fields["architecture"] == "qwen2" and fields["kind"] == read.CAUSAL and fields["quantization"] == "F32"
    assert fields["parameters"] == len(tokens) * 64 + 2 * 64 * 64
    assert fields["context"] == 2048 and fields["vocab"] == len(tokens) and not fields["problem"]


def test_a_padded_vocabulary_is_the_same_tokenizer_and_another_is_not(files):
    plain, padded, other = (read.read_gguf(files[k]) for k in ("plain", "padded", "other"))
    assert padded["vocab"] == plain["vocab"] == len(vocabulary())  # the [PAD<id>] rows are not tokens
    assert gguf_header.read_header(files["padded"]).tensors[0].shape[1] == 256 + 64  # the embedding is wider
    assert padded["tokenizer"] == plain["tokenizer"]
    assert other["tokenizer"] != plain["tokenizer"]


def test_the_fingerprint_of_a_checkpoint_matches_its_gguf(tmp_path):
    """The same vocabulary, merges and special ids from tokenizer files and from GGUF metadata: one fingerprint.
    And it is no constant: a merge or a special id more changes it."""
    from playground.models.tiny import byte_tokenizer

    tokenizer = byte_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    special = {"eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id}
    meta = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.eos_token_id": special["eos"],
            "tokenizer.ggml.padding_token_id": special["pad"]}
    assert vocab.from_folder(tmp_path) == vocab.from_gguf(meta)
    assert vocab.from_gguf({**meta, "tokenizer.ggml.merges": ["a b"]}) != vocab.from_gguf(meta)
    assert vocab.from_gguf({**meta, "tokenizer.ggml.bos_token_id": 1}) != vocab.from_gguf(meta)


@pytest.mark.parametrize("cut", [3, 20, 200, -100])
def test_a_truncated_file_fails_where_it_stops(files, tmp_path, cut):
    data = files["plain"].read_bytes()
    short = tmp_path / "short.gguf"
    short.write_bytes(data[:cut])
    if cut == 3:
        with pytest.raises(gguf_header.NotGGUF):
            gguf_header.read_header(short)
    elif cut < 0:  # the header whole, the last tensor's data cut short
        assert "truncated: its tensors need 100 bytes more" in read.read_gguf(short)["problem"]
    else:
        with pytest.raises(gguf_header.BadGGUF, match=f"truncated: the header stops at byte {cut:,}"):
            gguf_header.read_header(short)


def test_corrupt_counts_are_refused_not_allocated(files, tmp_path):
    data = bytearray(files["plain"].read_bytes())
    data[16:24] = (2**40).to_bytes(8, "little")  # the key-value count
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(gguf_header.BadGGUF, match="more than any real file holds"):
        gguf_header.read_header(bad)


def test_magic_not_suffix_makes_a_gguf(files, tmp_path):
    blob = tmp_path / "sha256-0123"
    blob.write_bytes(files["plain"].read_bytes())
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a model")
    assert gguf_header.is_gguf(blob) and not gguf_header.is_gguf(fake)
