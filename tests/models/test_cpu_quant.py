"""The weight-only CPU quantizations (int8-cpu, int4-cpu) on the tiny pair: they load, decode, and
speculative greedy output equals the same quantized target's own plain greedy output."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from playground.models.cpu_quant import Int4Linear, Int8Linear, quantize_for_cpu
from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import output_tokens
from playground.models.loading import load_model
from playground.models.pair_cache import PairCache
from playground.models.registry import ModelSpec, Source, load_registry
from playground.models.text import encode_prompt

TINY_TARGET = ModelSpec("tiny-target", (Source("tiny", "target"),), dtype="float32")
PROMPTS = ("def add(a, b):", "for i in range(10):")


def greedy(target, ids, drafter=None, n=16, gamma=4):
    return output_tokens(generate(target, ids, SpecConfig(max_new_tokens=n, gamma=gamma), drafter))


@pytest.mark.parametrize("quantization, body", [("int8-cpu", Int8Linear), ("int4-cpu", Int4Linear)])
def test_quantized_target_loads_decodes_and_speculation_stays_lossless(quantization, body):
    """float32, where a forward over k tokens gives each row the same numbers as k one-token
    forwards; in bf16 rounding may differ with the shape (bench/divergence.py), for the
    unquantized model as well."""
    pair = PairCache(load_registry()).get("tiny", target_quantization=quantization,
                                          draft_quantization=quantization)
    target = pair.target
    assert (target.quantization, target.dtype, target.device) == (quantization, "float32", "cpu")
    assert isinstance(target.model.model.layers[0].mlp.up_proj, body)
    assert isinstance(target.model.lm_head, Int8Linear)  # the output layer is quantized too (int8)
    assert target.footprint_bytes < load_model(TINY_TARGET).footprint_bytes
    for prompt in PROMPTS:
        ids = encode_prompt(pair.tokenizer, prompt)
        alone = greedy(target.model, ids)
        assert len(alone) == 16
        for gamma in (1, 4):
            assert greedy(target.model, ids, ModelDrafter(pair.draft.model), gamma=gamma) == alone


@pytest.mark.parametrize("quantization", ["int8-cpu", "int4-cpu"])
def test_bfloat16_quantized_target_decodes(quantization):
    m = load_model(TINY_TARGET, quantization=quantization, dtype="bfloat16")
    assert m.dtype == "bfloat16" and len(greedy(m.model, encode_prompt(m.tokenizer, "hi"), n=8)) == 8


@pytest.mark.parametrize("quantization, bound", [("int8-cpu", 0.02), ("int4-cpu", 0.15)])
def test_quantized_logits_stay_close_to_the_unquantized_model(quantization, bound):
    """A sanity bound on the error (int8 per channel, int4 per group of columns); a quantizer that
    got the kernel's zero-point convention wrong is off by far more (checked below)."""
    model = load_model(TINY_TARGET, dtype="float32").model
    ids = torch.tensor([[3, 5, 7, 11, 13, 17]])
    with torch.inference_mode():
        exact = model(ids).logits
        quantize_for_cpu(model, quantization)
        approx = model(ids).logits
    assert ((approx - exact).norm() / exact.norm()).item() < bound


def test_a_wrong_int4_zero_point_is_caught_by_that_bound(monkeypatch):
    model = load_model(TINY_TARGET, dtype="float32").model
    ids = torch.tensor([[3, 5, 7, 11, 13, 17]])
    real_init = Int4Linear.__init__

    def wrong_init(self, linear, group):  # zero = low (forgetting the kernel's "- 8" offset)
        real_init(self, linear, group)
        n, k = linear.weight.shape
        w = linear.weight.detach().float().reshape(n, k // group, group)
        self.scales_and_zeros[..., 1] = w.amin(dim=-1).transpose(0, 1).to(self.scales_and_zeros.dtype)

    with torch.inference_mode():
        exact = model(ids).logits
        monkeypatch.setattr(Int4Linear, "__init__", wrong_init)
        quantize_for_cpu(model, "int4-cpu")
        approx = model(ids).logits
    assert ((approx - exact).norm() / exact.norm()).item() > 0.15


def test_bad_quantization_names_give_the_allowed_values():
    with pytest.raises(ValueError, match=r"expected one of auto, none, nf4, int8, int8-cpu, int4-cpu, got 'int4'"):
        load_model(TINY_TARGET, quantization="int4")
    with pytest.raises(ValueError, match=r"quantization: expected one of int8-cpu, int4-cpu, got 'nf4'"):
        quantize_for_cpu(load_model(TINY_TARGET).model, "nf4")


def test_cpu_quantization_on_cuda_says_to_use_bitsandbytes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match=r"'int4-cpu' for model 'tiny-target' runs on PyTorch's CPU kernels; "
                                         r"on cuda use nf4 or int8 \(bitsandbytes\) or none"):
        load_model(TINY_TARGET, quantization="int4-cpu", device="cuda")


def test_auto_is_int4_on_a_cpu_and_none_on_cuda(monkeypatch):
    """auto picks what measured fastest on the device the model lands on (docs/benchmarks.md)."""
    loaded = load_model(TINY_TARGET, quantization="auto", device="cpu")
    assert loaded.quantization == "int4-cpu" and isinstance(loaded.model.lm_head, Int8Linear)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    built = []
    model = SimpleNamespace(get_memory_footprint=lambda: 0, dtype=torch.float32)  # nothing is built: only the choice is checked
    monkeypatch.setattr("playground.models.loading.load_from", lambda *args: built.append(args) or (model, None))
    assert load_model(TINY_TARGET, quantization="auto", device="cuda").quantization == "none"
    assert built[0][4] == "none"  # load_from(source, spec, device, dtype, quantization, report)


@pytest.mark.parametrize("make", [Int8Linear, lambda linear: Int4Linear(linear, 32)])
def test_long_forwards_take_the_dequantized_path_with_the_same_numbers(make):
    """Reading a prompt (many rows) multiplies by the dequantized weights instead of the packed
    kernel; both must compute the same product."""
    torch.manual_seed(0)
    layer = make(torch.nn.Linear(64, 96))
    x = torch.randn(layer.dequant_rows + 5, 64)
    long = layer(x)
    short = torch.cat([layer(x[i:i + 4]) for i in range(0, len(x), 4)])  # the kernel, 4 rows at a time
    assert torch.allclose(long, short, atol=1e-4, rtol=1e-4)


def test_a_quantized_draft_keeps_its_trimmed_head_quantized():
    """--draft-vocab on an int4-cpu draft: the first rows of its int8 output layer, same logits."""
    pair = PairCache(load_registry()).get("tiny", target_quantization="none", draft_quantization="int4-cpu")
    full, trimmed = ModelDrafter(pair.draft.model), ModelDrafter(pair.draft.model, draft_vocab=40)
    ids = encode_prompt(pair.tokenizer, "def add(a, b):")
    target = pair.target.model
    assert greedy(target, ids, trimmed) == greedy(target, ids) == greedy(target, ids, full)


@pytest.mark.parametrize("out_features", [64, 80, 96, 160])  # whole blocks of 32 or 64 rows, and a partial one
def test_int4_keeps_one_copy_of_its_weights_and_unpacks_the_kernels_layout(out_features):
    """Only the kernel's packed bytes are kept; long forwards unpack them to the same 4-bit values
    the quantizer computed (issue 39: the plain-order copy had cost 0.66 GB on the default target)."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(256, out_features)
    layer = Int4Linear(linear, 128)
    assert {name for name, _ in layer.named_buffers()} == {"packed", "scales_and_zeros"}
    n, k, g = out_features, 256, 128
    w = linear.weight.detach().float().reshape(n, k // g, g)
    low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-8)
    q = ((w - low) / scale).round().clamp(0, 15).reshape(n, k)
    assert torch.equal(layer.codes().float(), q)
