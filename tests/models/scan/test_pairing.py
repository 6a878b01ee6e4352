"""Pairing scanned models (models/scan/pairing.py): the class each draft gets and why, the α and knobs of
its family in models.yaml, and the estimate beside it (engine/estimate.py: the one formula)."""

from __future__ import annotations

import pytest
from stores import machine, ollama, vocabulary, write_gguf  # noqa: F401

from playground.models.registry import load_registry
from playground.models.scan import listing, pairing, stores

BIG = 10**12  # memory enough for anything here


@pytest.fixture
def found(machine, tmp_path):
    made = tmp_path / "made"
    store = machine / "ollama"
    ollama(store, "qwen:7b", write_gguf(made / "t.gguf", hidden=128, tokens=vocabulary(pad_to=400)))
    ollama(store, "qwen:0.5b", write_gguf(made / "d.gguf", hidden=32))
    ollama(store, "qwen:big", write_gguf(made / "b.gguf", hidden=256))
    ollama(store, "other:1b", write_gguf(made / "o.gguf", hidden=32, tokens=vocabulary(prefix="▁")))
    ollama(store, "llama:8b", write_gguf(made / "l8.gguf", arch="llama", hidden=128, tokens=vocabulary(extra=3)))
    ollama(store, "llama:1b", write_gguf(made / "l1.gguf", arch="llama", hidden=32, tokens=vocabulary(extra=3)))
    ollama(store, "embed:v1", write_gguf(made / "e.gguf", arch="bert", hidden=16))
    return {m.name: m for m in listing.scan(stores.locations()).models}


def classes(found, target: str, available: int = BIG) -> dict[str, pairing.Pairing]:
    memory = pairing.Memory(available)
    return {p.draft: p for p in pairing.drafts_for(found[target], found.values(), load_registry(), memory)}


def test_each_draft_is_classed_with_its_reason(found):
    got = classes(found, "qwen:7b")
    assert got["qwen:0.5b"].verdict == pairing.SAME  # the target's vocabulary is padded wider: the same tokenizer
    assert got["other:1b"].verdict == pairing.OTHER and "through the text" in got["other:1b"].why
    assert got["qwen:big"].verdict == pairing.NOT and got["qwen:big"].why.startswith("not smaller than the target")
    assert got["embed:v1"].verdict == pairing.NOT and got["embed:v1"].why == "not a causal LM: an embedding model"
    assert list(got)[0] == "qwen:0.5b"  # same tokenizer first, then through the text, then the unusable
    assert [p.verdict for p in got.values()] == sorted((p.verdict for p in got.values()),
                                                       key=[pairing.SAME, pairing.OTHER, pairing.NOT].index)
    c = got["qwen:0.5b"].c
    assert c == pytest.approx(found["qwen:0.5b"].bytes / found["qwen:7b"].bytes)


def test_a_pair_that_does_not_fit_says_so_with_the_figures(found):
    got = classes(found, "qwen:7b", available=1000)
    assert got["qwen:0.5b"].verdict == pairing.NOT
    assert got["qwen:0.5b"].why.startswith("does not fit: the pair needs about 0.5 GB")  # with the activations held back
    peak = pairing.Memory(BIG, build_peak=lambda m: 2 * BIG if m.name == "qwen:7b" else None)
    assert "does not fit" in pairing.pairing(found["qwen:7b"], found["qwen:0.5b"], load_registry(), peak).why


def test_alpha_and_knobs_come_from_the_family_in_models_yaml(found):
    registry = load_registry()
    qwen = classes(found, "qwen:7b")["qwen:0.5b"]
    default = registry.pair("default")
    assert (qwen.alpha, qwen.family) == (default.alpha, "default") and "qwen2 drafting qwen2" in qwen.alpha_said
    knobs = pairing.suggested_knobs(qwen, registry, found["qwen:0.5b"])
    # the draft's vocabulary is far smaller than the family's 65,536-token cut: no cut
    assert knobs == {"gamma": default.gamma, "temperature": default.temperature, "draft_vocab": 0,
                     "alpha": default.alpha}
    llama = classes(found, "llama:8b")["llama:1b"]
    assert llama.verdict == pairing.SAME and (llama.alpha, llama.alpha_said, llama.family) == (0.7, "assumed", None)
    assert pairing.suggested_knobs(llama, registry, found["llama:1b"]) == {"gamma": 4, "temperature": 0.0,
                                                                           "draft_vocab": 0}
    across = classes(found, "qwen:7b")["other:1b"]
    assert across.alpha_said == "assumed"  # a family's α speaks for its own tokenizer only


def test_the_estimate_is_the_formula_and_says_what_is_assumed(found):
    from playground.engine.sampling import expected_speedup
    from playground.measure.bench.verify_cost import VerifyCurve
    from playground.engine.estimate import estimate

    qwen = classes(found, "qwen:7b")["qwen:0.5b"]
    assumed = estimate(qwen.alpha, qwen.alpha_said, qwen.c)
    assert assumed.speedup == pytest.approx(expected_speedup(qwen.alpha, assumed.gamma, qwen.c))
    assert "v(k) assumed 1" in assumed.line() and assumed.line().startswith("estimate ")
    steep = VerifyCurve(tuple(1 + 0.5 * k for k in range(9)), 0.1)
    measured = estimate(qwen.alpha, qwen.alpha_said, qwen.c, steep)
    assert measured.speedup < assumed.speedup and measured.gamma <= assumed.gamma and "measured here" in measured.line()
    # a step after an all-accepted call reads two rows in the draft, the second costing what the target's does
    two_rows = (qwen.c, qwen.c * steep.v[1])
    assert measured.speedup == pytest.approx(expected_speedup(qwen.alpha, measured.gamma, two_rows, steep.v))
    assert measured.speedup < expected_speedup(qwen.alpha, measured.gamma, qwen.c, steep.v)
