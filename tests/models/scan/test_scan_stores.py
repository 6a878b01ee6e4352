"""The scan of your models over every store as its tool lays it out (tests/stores.py): each model found
with its name, store and facts; every bad input listed with its reason while the rest is found; a 50 GB
file read no further than its header; the stores byte for byte unchanged; a second scan answering from
the cache without reading a header."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from stores import checkpoint, hub, llamacpp, machine, ollama, tree, vocabulary, write_gguf  # noqa: F401

from playground.models.scan import listing, read, stores

HUGE = 50 * 10**9


@pytest.fixture
def shelf(machine, tmp_path):
    """Every store of the machine holding models and bad inputs; the models' files are made in tmp_path/made
    and linked into the stores."""
    from playground.models.tiny import tiny_pair

    made = tmp_path / "made"
    big = write_gguf(made / "big.gguf", hidden=128, tokens=vocabulary(pad_to=400))
    small = write_gguf(made / "small.gguf")
    ollama(machine / "ollama", "qwen2.5:7b", big)
    ollama(machine / "ollama", "qwen2.5:0.5b", small)
    ollama(machine / "ollama", "nomic-embed-text:latest",
           write_gguf(made / "embed.gguf", arch="nomic-bert", extra={"nomic-bert.pooling_type": 1}))
    ollama(machine / "ollama", "x:Q4", small, registry="hf.co", namespace="bartowski")
    manifests = machine / "ollama" / "manifests" / "registry.ollama.ai" / "library"
    (manifests / "broken").mkdir(parents=True)
    (manifests / "broken" / "latest").write_text("{not json")
    (manifests / "gone").mkdir()
    (manifests / "gone" / "latest").write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "ab" * 32}]}))
    studio = machine / ".lmstudio" / "models"
    os.symlink(small, (studio / "pub" / "repo").mkdir(parents=True) or studio / "pub" / "repo" / "small-q8.gguf")
    write_gguf(studio / "pub" / "repo" / "mmproj-f16.gguf", arch="clip", general_type="mmproj")
    write_gguf(studio / "pub" / "odd" / "odd.gguf", arch="notanarch")
    (studio / "pub" / "fake").mkdir(parents=True)
    (studio / "pub" / "fake" / "fake.gguf").write_text("this is not a model")
    os.symlink(made / "nowhere.gguf", studio / "pub" / "fake" / "dangling.gguf")
    write_gguf(studio / "pub" / "split" / "m-00001-of-00002.gguf", extra={"split.count": 2, "split.no": 0})
    write_gguf(studio / "pub" / "split" / "m-00002-of-00002.gguf", extra={"split.count": 2, "split.no": 1})
    (studio / "pub" / "half").mkdir(parents=True)
    write_gguf(studio / "pub" / "half" / "h-00002-of-00003.gguf", extra={"split.count": 3, "split.no": 1})
    cut = studio / "pub" / "cut" / "cut.gguf"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(small.read_bytes()[:-500])
    llamacpp(machine / "llama.cpp", "owner", "Repo-GGUF", "Q8_0", small)
    target, _, tokenizer = tiny_pair(seed=0)
    hub(machine / "hub", "org/tiny-target", {p.name: p for p in checkpoint(made / "ckpt", target, tokenizer).iterdir()})
    huge = machine / "folder" / "huge.gguf"
    write_gguf(huge)
    with open(huge, "r+b") as f:
        f.truncate(HUGE)  # sparse: 50 GB of zeros past a real header
    return machine


def found(machine) -> listing.Scan:
    return listing.scan(stores.locations([machine / "folder"]))


def by_name(scan: listing.Scan) -> dict[str, listing.Model]:
    return {m.name: m for m in scan.models}


def test_every_store_is_found_with_its_names_and_facts(shelf):
    models = by_name(found(shelf))
    big, small = models["qwen2.5:7b"], models["qwen2.5:0.5b"]
    assert (big.source, big.format, big.architecture, big.usable) == ("ollama", "gguf", "qwen2", True)
    assert Path(big.path).parent.name == "blobs" and Path(big.path).name == f"sha256-{big.digest}"
    assert big.vocab == small.vocab == len(vocabulary()) and big.tokenizer == small.tokenizer  # padded: same
    assert big.parameters > small.parameters and big.quantization == "F32" and big.context == 2048
    assert models["hf.co/bartowski/x:Q4"].usable
    assert models["pub/repo/small-q8"].source == "lm studio" and models["pub/repo/small-q8"].usable
    assert models["owner/Repo-GGUF:Q8_0"].source == "llama.cpp"
    tiny = models["org/tiny-target"]
    assert (tiny.source, tiny.format, tiny.architecture, tiny.kind, tiny.usable) == \
        ("hub cache", "checkpoint", "qwen2", read.CAUSAL, True)
    assert tiny.parameters and tiny.vocab == 259 and tiny.context == 2048 and tiny.quantization == "float32"


def test_every_bad_input_is_listed_with_its_reason(shelf):
    models = by_name(found(shelf))
    why = {name: m.why for name, m in models.items() if not m.usable}
    assert "not a causal LM: an embedding model" == why["nomic-embed-text:latest"]
    assert "not a causal LM: a vision projector" == why["pub/repo/mmproj-f16"]
    assert "manifest is not JSON" in why["broken:latest"]
    assert "which is missing from blobs/" in why["gone:latest"]
    assert why["pub/fake/fake"].startswith("not a GGUF file")
    assert why["pub/fake/dangling"].startswith("dangling symlink")
    assert why["pub/split/m-00001-of-00002"].startswith("split GGUF (part 1 of 2)")
    assert "m-00002-of-00002" not in " ".join(models)  # a split file is one entry
    assert "first part (00001) is missing" in why["pub/half/h-00001-of-00003"]
    assert why["pub/cut/cut"].startswith("truncated: its tensors need 500 bytes more")
    assert "no loader here for GGUF architecture 'notanarch'" in why["pub/odd/odd"]
    assert sum(m.usable for m in models.values()) == 7  # the rest is found all the same


def test_a_50_gb_file_is_read_no_further_than_its_header(shelf):
    """Counted by the kernel (/proc/self/io's rchar: every byte this process read), not assumed."""
    io = Path("/proc/self/io")
    if not io.exists():
        pytest.skip("needs Linux's /proc/self/io to count the bytes read")

    def read_bytes() -> int:
        return int(next(line for line in io.read_text().splitlines() if line.startswith("rchar")).split()[1])

    before = read_bytes()
    huge = by_name(listing.scan(stores.locations([shelf / "folder"], env={}, home=shelf / "nothing")))["huge"]
    assert read_bytes() - before < 50 << 20  # the other files and the cache's: megabytes, not 50 GB
    assert huge.usable and huge.bytes == HUGE


def test_the_stores_are_unchanged_byte_for_byte(shelf):
    before = tree(shelf)
    found(shelf)
    found(shelf)
    assert tree(shelf) == before


def test_a_second_scan_reads_no_header_and_a_changed_file_is_read_again(shelf, monkeypatch):
    first = found(shelf)
    seen = []
    monkeypatch.setattr(read, "read_gguf", lambda path: seen.append(path) or pytest.fail(f"read {path}"))
    monkeypatch.setattr(read, "read_checkpoint", lambda path: pytest.fail(f"read {path}"))
    assert found(shelf) == first
    small = shelf / "ollama" / "blobs" / f"sha256-{by_name(first)['qwen2.5:0.5b'].digest}"
    os.utime(small, ns=(small.stat().st_atime_ns, small.stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(read, "read_gguf", lambda path: seen.append(os.stat(path).st_ino) or {"format": "", "problem": "x"})
    found(shelf)
    assert set(seen) == {small.stat().st_ino} and len(seen) == 3  # the one file whose time changed, in the
    # 3 places it is linked (its two Ollama tags share the blob: read once)


def test_each_store_is_looked_for_where_its_variable_says_else_its_defaults(tmp_path):
    home = tmp_path / "h"
    places = {(s.source, str(s.root), s.said) for s in stores.locations([tmp_path / "mine"], env={}, home=home)}
    assert places == {("hub cache", f"{home}/.cache/huggingface/hub", "default"),
                      ("ollama", f"{home}/.ollama/models", "default"),
                      ("ollama", "/usr/share/ollama/.ollama/models", "default (Linux service)"),
                      ("lm studio", f"{home}/.lmstudio/models", "default"),
                      ("lm studio", f"{home}/.cache/lm-studio/models", "default (older LM Studio)"),
                      ("llama.cpp", f"{home}/.cache/llama.cpp", "default"),
                      ("folder", f"{tmp_path}/mine", "--models-dir")}
    env = {"HF_HOME": "/hf", "OLLAMA_MODELS": "/o", "LLAMA_CACHE": "/l", "XDG_CACHE_HOME": "/x"}
    roots = {(s.source, str(s.root)) for s in stores.locations(env=env, home=home)}
    assert {("hub cache", "/hf/hub"), ("ollama", "/o"), ("llama.cpp", "/l"), ("lm studio", "/x/lm-studio/models")} <= roots
    assert ("hub cache", "/h") in {(s.source, str(s.root)) for s in stores.locations(env={"HF_HUB_CACHE": "/h",
                                                                                         "HF_HOME": "/hf"})}


def test_json_has_one_object_per_model_with_the_issues_fields(shelf, tmp_path, capsys):
    from playground.models.cli import main

    assert main(["scan", "--models-dir", str(shelf / "folder"), "--json", str(tmp_path / "scan.json")]) == 0
    rows = json.loads((tmp_path / "scan.json").read_text())
    assert {r["name"] for r in rows} == {m.name for m in found(shelf).models}
    fields = {"name", "source", "path", "format", "architecture", "parameters", "quantization", "bytes", "context",
              "vocab", "tokenizer", "usable", "why"}
    assert all(fields <= set(r) for r in rows)
    printed = capsys.readouterr().out
    assert "qwen2.5:7b" in printed and "no: dangling symlink" in printed and "(--models-dir; 1 found)" in printed
