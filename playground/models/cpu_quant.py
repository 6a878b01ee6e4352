"""Weight-only int8 and int4 linear layers on PyTorch's own CPU kernels, applied after loading.

Why not bitsandbytes on a CPU: its 4-bit kernel works on blocks of at most 4 rows, so verifying
γ + 1 tokens costs more plain steps as γ grows (issue 10), and it leaves the output layer in bf16
beside a 4-bit body. PyTorch ships weight-only kernels for CPUs (`_weight_int8pack_mm`,
`_weight_int4pack_mm_for_cpu`, AVX-512/AMX) that read 1 or ½ byte per weight and dequantize in
registers; every linear layer is quantized, the output layer included, so the plain run gets
the same saving as the speculative one.

- int8: symmetric, one scale per output row (per channel).
- int4: asymmetric, one scale and zero per group of GROUP input columns (w = (q − 8)·s + z, the
  kernel's convention), output layer in int8 (its 151,936 rows decide the argmax; int4 there
  moves the text more than it saves time).
Layers whose shapes a kernel cannot take stay as they are.

`random_for_cpu` gives a model the same layers holding random codes instead (models/twin.py: a
same-shape twin auto times eager's step on without dequantizing a GGUF); the layouts it writes are
written here, beside the quantization that writes them from weights, so the two cannot drift apart.

The kernels work on a few rows at a time and re-read the weights for each block, so a forward
over many tokens (reading the prompt) would cost tens of plain steps; above `dequant_rows` tokens
the weights are dequantized to bf16 for that call and multiplied by the dense (AMX) matmul, whose
cost hardly grows with the rows (thresholds from timing one 8960 x 1536 layer on a 2-core Xeon:
int8's kernel costs 2.5 ms at 1 row, 51 at 16, 205 at 64; int4's 0.8, 10 and 84; dequantizing
costs about 50 ms for int8 and 100 ms for int4, the dense matmul 40 ms at 200 rows). Decoding and
verification stay on the packed kernels.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

CPU_QUANTIZATIONS = ("int8-cpu", "int4-cpu")
GROUP = 128  # int4 columns per scale and zero: the common choice (GPTQ, AWQ, torchao)
INNER_K_TILES = 8  # packing parameter of the int4 kernel (2, 4 or 8)


class Int8Linear(nn.Module):
    """y = x Wᵀ (+ b) with W stored as int8 [out, in] and a bf16 scale per output row."""

    dequant_rows = 32  # more tokens than this in one forward: dequantize, use the dense matmul

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-8)
        self.register_buffer("weight_int8", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(linear.weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @classmethod
    def random(cls, linear: nn.Linear, noise: Noise) -> Int8Linear:
        """A layer of `linear`'s shape, dtype and bias holding random codes and scales in the layout
        __init__ writes; `linear`'s values are never read (they may be uninitialized)."""
        n, k = linear.weight.shape
        return filled(cls, linear, noise, weight_int8=noise((n, k), torch.int8),  # any byte is a code
                      scales=noise((n,), linear.weight.dtype).abs() / 127)

    def dequantized(self) -> torch.Tensor:
        return self.weight_int8.to(self.scales.dtype) * self.scales[:, None]  # [out, in]

    def first_rows(self, rows: int) -> Int8Linear:
        """The layer restricted to its first `rows` outputs, still int8 (a trimmed draft head)."""
        part = Int8Linear.__new__(Int8Linear)
        nn.Module.__init__(part)
        part.register_buffer("weight_int8", self.weight_int8[:rows])
        part.register_buffer("scales", self.scales[:rows])
        part.bias = None if self.bias is None else self.bias[:rows]
        part.in_features, part.out_features = self.in_features, rows
        return part

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.scales.dtype)  # [tokens, in]
        if flat.shape[0] > self.dequant_rows:
            y = flat @ self.dequantized().T
        else:
            y = torch._weight_int8pack_mm(flat, self.weight_int8, self.scales)  # [tokens, out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


class Int4Linear(nn.Module):
    """y = x Wᵀ (+ b) with W in 4 bits, packed for the CPU kernel, per-group scales and zeros."""

    dequant_rows = 96

    def __init__(self, linear: nn.Linear, group: int):
        super().__init__()
        n, k = linear.weight.shape
        w = linear.weight.detach().float().reshape(n, k // group, group)
        low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=1e-8)
        q = ((w - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        zero = low + 8 * scale  # the kernel computes (q - 8) * scale + zero
        # one copy of the 4-bit values: the kernel's packing; long forwards unpack it (`codes`)
        self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES))
        pairs = torch.cat([scale, zero], dim=-1).transpose(0, 1).contiguous()  # [k / group, n, 2]
        self.register_buffer("scales_and_zeros", pairs.to(linear.weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.group, self.in_features, self.out_features = group, k, n

    @classmethod
    def random(cls, linear: nn.Linear, group: int, noise: Noise) -> Int4Linear:
        """A layer of `linear`'s shape, dtype and bias holding random codes, scales and zeros in the
        layout __init__ writes: the kernel's packing is [out, in / 2] bytes of two 4-bit codes each,
        so random bytes are random codes in whatever order this CPU packs them (int4_layout)."""
        n, k = linear.weight.shape
        scale, zero = (noise((k // group, n, 1), linear.weight.dtype) for _ in range(2))
        layer = filled(cls, linear, noise, packed=noise((n, k // 2), torch.uint8),
                       scales_and_zeros=torch.cat([scale.abs() / 15, zero], dim=-1))  # [k / group, n, 2]
        layer.group = group
        return layer

    def codes(self) -> torch.Tensor:
        """The 4-bit values q [out, in] (uint8), unpacked from the kernel's layout."""
        return unpack_int4(self.packed, self.out_features, self.in_features)

    def dequantized(self) -> torch.Tensor:
        n, k, dtype = self.out_features, self.in_features, self.scales_and_zeros.dtype
        q = self.codes().reshape(n, k // self.group, self.group)
        scale, zero = self.scales_and_zeros.transpose(0, 1).unbind(-1)  # [n, k / group] each
        return ((q.to(dtype) - 8) * scale[..., None] + zero[..., None]).reshape(n, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.scales_and_zeros.dtype)  # [tokens, in]
        if flat.shape[0] > self.dequant_rows:
            y = flat @ self.dequantized().T
        else:
            y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, self.group, self.scales_and_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


Noise = Callable[[tuple, torch.dtype], torch.Tensor]  # (shape, dtype) -> a tensor of random values


def filled(cls, linear: nn.Linear, noise: Noise, **buffers: torch.Tensor):
    """A `cls` layer made without quantizing: these buffers, `linear`'s features, a random bias where
    `linear` has one (the attributes each __init__ sets)."""
    layer = cls.__new__(cls)
    nn.Module.__init__(layer)
    for name, value in buffers.items():
        layer.register_buffer(name, value)
    bias = None if linear.bias is None else noise(tuple(linear.bias.shape), linear.bias.dtype)
    layer.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
    layer.in_features, layer.out_features = linear.in_features, linear.out_features
    return layer


def unpack_int4(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The kernel's packed bytes -> q [n, k] (uint8), in the layout this CPU's kernel wrote.

    PyTorch packs rows in blocks whose width and nibble order follow the CPU's vector width
    (aten/native/cpu/int4mm_kernel.cpp: 64 rows split in halves on AVX-512, 32 on AVX2, 32
    interleaved otherwise; a last partial block interleaved), so the layout is found once by a
    probe rather than assumed."""
    block, halves = int4_layout()
    return unpack_in_layout(packed, n, k, block, halves)


def unpack_in_layout(packed: torch.Tensor, n: int, k: int, block: int, halves: bool) -> torch.Tensor:
    flat, full = packed.reshape(-1), n // block * block
    head = flat[: full * k // 2].reshape(full // block, k, block // 2)  # [blocks, k, block/2] bytes
    low, high = head & 15, head >> 4
    rows = torch.cat([low, high], -1) if halves else torch.stack([low, high], -1).reshape(*head.shape[:2], block)
    q = rows.transpose(1, 2).reshape(full, k)  # [blocks * block, k]
    if full == n:
        return q
    tail = flat[full * k // 2:].reshape(k, (n - full) // 2)  # the partial block, interleaved
    return torch.cat([q, torch.stack([tail & 15, tail >> 4], -1).reshape(k, n - full).T])


@functools.cache
def int4_layout() -> tuple[int, bool]:
    """(rows per block, halves or interleaved) of this CPU's int4 packing, found by a round trip."""
    q = torch.randint(0, 16, (80, 64), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    packed = torch._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES)
    for layout in ((64, True), (32, True), (32, False), (64, False)):
        if torch.equal(unpack_in_layout(packed, 80, 64, *layout).to(torch.int32), q):
            return layout
    raise RuntimeError("this PyTorch packs int4 weights in a layout cpu_quant does not know")


def int4_group(linear: nn.Linear) -> int | None:
    """The largest usable group size for this layer's shape, or None if the kernel cannot take it."""
    n, k = linear.weight.shape
    if n % 8:
        return None
    return next((g for g in (GROUP, 64, 32) if k % g == 0), None)


def quantize_for_cpu(model: nn.Module, quantization: str) -> int:
    """Replace the model's linear layers in place (output layer included); returns how many.

    The output layer is replaced by module, so a head tied to the input embeddings stops sharing
    storage with them: the embeddings stay bf16 for lookups, the head is read quantized."""
    replaced = replace_linears(model, quantization)
    own_remaining(model)
    return replaced


def random_for_cpu(model: nn.Module, quantization: str, noise: Noise) -> int:
    """quantize_for_cpu's replacement with random codes: the same layer classes, shapes, groups and
    packing, no weight read (a twin for timing, models/twin.py); returns how many."""
    return replace_linears(model, quantization, noise)


def replace_linears(model: nn.Module, quantization: str, noise: Noise | None = None) -> int:
    """Each linear layer a kernel can take replaced by its quantized layer: from its weights, or from
    `noise` where given."""
    if quantization not in CPU_QUANTIZATIONS:
        raise ValueError(f"quantization: expected one of {', '.join(CPU_QUANTIZATIONS)}, got {quantization!r}")
    head = model.get_output_embeddings()
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear):
                continue
            new = quantized_linear(child, quantization, child is head, noise)
            if new is not None:
                setattr(parent, name, new)
                replaced += 1
    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False  # nothing may re-tie (and so un-quantize) the head
    return replaced


def own_remaining(model: nn.Module) -> None:
    """Copy the tensors left unquantized (embeddings, norms, biases) out of the checkpoint's memory map.

    transformers maps a safetensors file and its tensors view the mapping; while any one of them
    lives, the whole file stays mapped, and every page quantizing read stays resident: 3.0 GB of the
    default target's bf16 file beside its 1.3 GB int4 model (measured with /proc/self/smaps_rollup).
    A copy of what is left (0.47 GB, the embeddings) lets the mapping go."""
    with torch.no_grad():
        for module in model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                param.data = param.data.clone()


def quantized_linear(linear: nn.Linear, quantization: str, is_head: bool,
                     noise: Noise | None = None) -> nn.Module | None:
    if quantization == "int8-cpu" or is_head:
        return Int8Linear(linear) if noise is None else Int8Linear.random(linear, noise)
    group = int4_group(linear)
    if group is None:
        return None
    return Int4Linear(linear, group) if noise is None else Int4Linear.random(linear, group, noise)
