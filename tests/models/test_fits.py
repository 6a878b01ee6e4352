"""Whether a model fits the GPU before it loads (models/fits.py), and the CUDA load path around it, on
the CPU: the card's calls (is_available, get_device_capability, mem_get_info) stand in for a GPU and
from_pretrained is watched, so what reaches it (or that nothing does) is what is checked. The counts
are held to what loading really builds: the tiny model's parameters, its nf4 and int8 footprints as
bitsandbytes quantizes them on the CPU, and the static runner's cache tensors."""

import pytest
import torch

from playground.models import fits, loading
from playground.models.fits import DoesNotFit, check_fits, need
from playground.models.loading import load_model
from playground.models.registry import ModelSpec, Source
from playground.models.tiny import tiny_pair

GB = 10**9


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny target saved as a float32 checkpoint with its tokenizer: (path, model)."""
    target, _, tokenizer = tiny_pair(seed=0)
    path = tmp_path_factory.mktemp("tiny-checkpoint")
    target.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, target


def a_card(monkeypatch, free: int, total: int = 16 * GB, capability=(8, 9)):
    """torch sees a CUDA card with `free` bytes free; this process's allocator holds nothing."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)


def test_the_count_is_what_loading_builds(checkpoint):
    path, model = checkpoint
    assert fits.weight_bytes(path, "float32", "none") == sum(p.numel() * 4 for p in model.parameters())
    assert fits.weight_bytes(path, "bfloat16", "none") == sum(p.numel() * 2 for p in model.parameters())
    for quantization, within in (("nf4", 0.10), ("int8", 0.01)):  # nf4: its block scales are no buffer
        built = load_model(ModelSpec("t", (Source("local", str(path)),)), quantization=quantization,
                           dtype="bfloat16", device="cpu").footprint_bytes
        assert fits.weight_bytes(path, "bfloat16", quantization) == pytest.approx(built, rel=within)
    from playground.engine.runners.static import CachePool

    cache = CachePool(model).new(256)
    held = sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values))
    entries = cache.layers[0].max_cache_len  # 256 and the static runner's spare entry (static.SPARE)
    assert entries >= 256 and fits.cache_bytes(fits.text_config(path), "float32", entries) == held


def test_a_model_that_fits_is_let_through_with_what_it_needs(monkeypatch, checkpoint):
    path, _ = checkpoint
    a_card(monkeypatch, free=GB)
    wanted = check_fits("tiny", path, "bfloat16", "none", 4096)
    assert wanted == need(path, "bfloat16", "none", 4096) and wanted.total < GB
    assert check_fits("tiny", path / "nowhere", "bfloat16", "none", 4096) is None  # nothing to count: not refused


def test_a_model_that_does_not_fit_is_refused_with_the_figures_and_a_quantization_that_fits(monkeypatch,
                                                                                         checkpoint):
    path, _ = checkpoint
    plain, int8, nf4 = (need(path, "bfloat16", q, 4096).total for q in ("none", "int8", "nf4"))
    a_card(monkeypatch, free=int8 + 1000, total=2 * GB)
    with pytest.raises(DoesNotFit) as raised:
        check_fits("tiny", path, "bfloat16", "none", 4096)
    message = str(raised.value)
    assert message.startswith("model 'tiny' does not fit this GPU:") and "for 4,096 tokens" in message
    assert f"{fits.gb(plain)} with" in message and f"but {fits.gb(int8 + 1000)} of 2.0 GB are free" in message
    assert "Use quantization int8 (its target_quantization or draft_quantization)" in message  # closer to bf16 first
    a_card(monkeypatch, free=nf4 + 1000, total=2 * GB)
    with pytest.raises(DoesNotFit, match="Use quantization nf4"):
        check_fits("tiny", path, "bfloat16", "int8", 4096)


def test_when_no_quantization_fits_the_context_that_does_is_named(monkeypatch, checkpoint):
    path, _ = checkpoint
    at_one = need(path, "bfloat16", "nf4", 1)
    tokens = 2000
    a_card(monkeypatch, free=at_one.weights + fits.ACTIVATIONS_BYTES + tokens * at_one.cache)
    with pytest.raises(DoesNotFit, match=f"With quantization nf4, a context of {tokens:,} tokens fits"):
        check_fits("tiny", path, "bfloat16", "none", 10**6)
    a_card(monkeypatch, free=at_one.weights, total=GB)
    with pytest.raises(DoesNotFit, match=r"Not even in nf4 .*free the card \(1.0 GB of it is in use\)"):
        check_fits("tiny", path, "bfloat16", "none", 4096)


def test_the_allocators_unused_memory_counts_as_free(monkeypatch):
    a_card(monkeypatch, free=GB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * GB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * GB)
    assert fits.free_bytes() == (2 * GB, 16 * GB)


class Watched:
    """from_pretrained, watched: the keyword arguments it got; hands back the tiny float32 model on the
    CPU whatever the device_map asks (there is no GPU here)."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, path, **kwargs):
        self.calls.append(kwargs)
        return self.model


def test_on_cuda_the_weights_go_straight_to_the_device_and_a_model_too_big_is_refused_before_loading(
        monkeypatch, checkpoint):
    """device_map puts each tensor on the GPU as it is read (no whole copy in host RAM first, then
    .to(cuda)); a model that does not fit is refused before from_pretrained, and no second source is
    tried for it (none would make it smaller)."""
    from transformers import AutoModelForCausalLM

    path, _ = checkpoint
    watched = Watched(tiny_pair(seed=0)[0])
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", watched)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: pytest.fail("moved after loading"))
    spec = ModelSpec("tiny-qwen", (Source("local", str(path)), Source("local", str(path))))
    a_card(monkeypatch, free=GB, capability=(7, 5))  # a T4: no native bf16, and Qwen2 overflows float16
    said = []
    loaded = load_model(spec, device="cuda", progress=lambda m, f: said.append(m))
    assert watched.calls == [{"dtype": torch.float32, "trust_remote_code": False, "device_map": {"": "cuda"}}]
    assert loaded.dtype == "float32" and any("no native bfloat16 (compute capability 7.5)" in m for m in said)
    a_card(monkeypatch, free=need(path, "float32", "none", loading.FIT_CONTEXT).total - 1)
    with pytest.raises(DoesNotFit, match="model 'tiny-qwen' does not fit this GPU"):
        load_model(spec, device="cuda", dtype="float32")
    assert len(watched.calls) == 1  # refused before loading, once


def test_on_the_cpu_nothing_changes(monkeypatch, checkpoint):
    """No device_map, no memory check: the CPU load is as it was."""
    from transformers import AutoModelForCausalLM

    path, _ = checkpoint
    calls = []
    real = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda p, **kwargs: calls.append(kwargs) or real(p, **kwargs))
    monkeypatch.setattr(fits, "free_bytes", lambda: pytest.fail("the CPU has no card to ask"))
    loaded = load_model(ModelSpec("t", (Source("local", str(path)),)), device="cpu")
    assert calls == [{"dtype": torch.bfloat16, "trust_remote_code": False}] and loaded.dtype == "bfloat16"
