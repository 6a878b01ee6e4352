"""A tiny GGUF and the handle loading makes of it (models/handle.py), for the tests of handles in
models/ and of what the engine does with one: test modules import the fixtures by name, as the browser
tests import tests/browser.py."""

from __future__ import annotations

import pytest

from playground.models.registry import ModelSpec, Source


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """The tiny target as a float32 GGUF file, and the model it was written from."""
    from playground.models.gguf_file import write_gguf
    from playground.models.tiny import tiny_pair

    target, _, tokenizer = tiny_pair(seed=0)
    return write_gguf(target, tokenizer, tmp_path_factory.mktemp("gguf") / "target.gguf"), target


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """An empty cache; transformers' GGUF tokenizer reader given the tiny tokenizer itself: the tiny
    byte-level vocabulary has no merge whose result is a token, and the reader refuses a BPE without
    one (llama.cpp needs a merge, so write_gguf writes one that transformers cannot build)."""
    from transformers import AutoTokenizer

    from playground.models.tiny import tiny_pair

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    real = AutoTokenizer.from_pretrained.__func__

    def from_pretrained(cls, path, *args, gguf_file=None, **kwargs):
        return tiny_pair(seed=0)[2] if gguf_file else real(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(from_pretrained))
    return tmp_path / "cache"


def load(path, quantization="int4-cpu"):
    from playground.models.loading import load_model

    return load_model(ModelSpec("tiny-gguf", (Source("local", str(path)),)), quantization=quantization,
                      device="cpu")  # dtype auto: bfloat16, as the checkpoint path writes it
