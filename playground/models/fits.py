"""Whether a model fits the GPU before it loads: its weights as they will be quantized, plus its KV
cache at a context, against the card's free memory (`torch.cuda.mem_get_info`).

Counted from the checkpoint, not from the model: each safetensors file begins with a JSON header
naming every tensor's shape, so the count reads a few kilobytes and builds nothing. A load that
would not fit is refused with the figures and what would fit instead (a quantization, a shorter
context), rather than running out of memory half-way through the weights.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

GB = 1e9
# Bytes a parameter of a decoder layer's linear weight takes once bitsandbytes has quantized it: nf4
# keeps 4 bits and a float32 scale per block of 64 (0.5 + 4/64), int8 one byte (its per-row scale is
# noise). Embeddings, the output layer, norms and biases stay in the model's dtype.
QUANTIZED_BYTES = {"nf4": 0.5 + 4 / 64, "int8": 1.0}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Held back for what a forward allocates beside weights and cache (a prompt's activations and logits,
# the allocator's rounding), so that a fit is not a fit by a few megabytes.
ACTIVATIONS_BYTES = int(0.5 * GB)


class DoesNotFit(ValueError):
    """A model that would not fit the card's free memory; the message says what would."""


@dataclass(frozen=True)
class Need:
    """What a model takes on the card: its weights and its KV cache at `context` tokens."""

    weights: int
    cache: int
    context: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + ACTIVATIONS_BYTES


def need(path: Path, dtype: str, quantization: str, context: int) -> Need:
    """Bytes the checkpoint at `path` takes loaded in `dtype` and `quantization`, with a cache of `context` tokens."""
    return Need(weight_bytes(path, dtype, quantization), cache_bytes(text_config(path), dtype, context), context)


def weight_bytes(path: Path, dtype: str, quantization: str) -> int:
    """The weights loaded: a decoder layer's 2-D weight as `quantization` stores it, every other tensor in `dtype`."""
    per = DTYPE_BYTES[dtype]
    total = 0.0
    for name, shape in tensor_shapes(Path(path)):
        count = 1
        for size in shape:
            count *= size
        quantized = quantization in QUANTIZED_BYTES and len(shape) == 2 and ".layers." in name \
            and name.endswith(".weight")
        total += count * (QUANTIZED_BYTES[quantization] if quantized else per)
    return int(total)


def tensor_shapes(path: Path) -> list[tuple[str, list[int]]]:
    """(name, shape) of every tensor in the checkpoint's safetensors files, read from their headers."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path}: no safetensors files to count the weights of")
    shapes = []
    for file in files:
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))  # the header's length, then the header
            header = json.loads(f.read(length))
        shapes += [(name, entry["shape"]) for name, entry in header.items() if name != "__metadata__"]
    return shapes


def text_config(path: Path) -> dict:
    """config.json's text model (a multimodal checkpoint nests it under text_config)."""
    config = json.loads((Path(path) / "config.json").read_text())
    return config.get("text_config") or config


def cache_bytes(config: dict, dtype: str, context: int) -> int:
    """Keys and values of every layer for `context` tokens, in the model's dtype."""
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    per_token = 2 * config["num_hidden_layers"] * config.get("num_key_value_heads", heads) * head_dim
    return per_token * context * DTYPE_BYTES[dtype]


def free_bytes() -> tuple[int, int]:
    """(free, total) bytes of the current CUDA device, counting what this process's allocator holds
    unused as free (torch reuses it before asking the card for more)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated(), total


def check_fits(name: str, path: Path, dtype: str, quantization: str, context: int) -> Need | None:
    """Raise DoesNotFit, naming the figures and what fits instead, when the model would not fit.
    -> what it needs; None for a checkpoint it cannot count (no safetensors, an unusual config),
    which then loads as it would have without the check."""
    try:
        wanted = need(path, dtype, quantization, context)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    free, total = free_bytes()
    if wanted.total <= free:
        return wanted
    raise DoesNotFit(f"model {name!r} does not fit this GPU: {gb(wanted.weights)} of weights ({dtype}, "
                     f"quantization {quantization}) and {gb(wanted.cache)} of KV cache for {context:,} tokens, "
                     f"{gb(wanted.total)} with {gb(ACTIVATIONS_BYTES)} for activations, but {gb(free)} of "
                     f"{gb(total)} are free. {instead(path, dtype, quantization, context, free, total)}")


def instead(path: Path, dtype: str, quantization: str, context: int, free: int, total: int) -> str:
    """What would fit: a lighter bitsandbytes quantization (int8, the closer to the weights, first), else
    the longest context the lightest one leaves room for."""
    for other in ("int8", "nf4"):
        if QUANTIZED_BYTES[other] < QUANTIZED_BYTES.get(quantization, DTYPE_BYTES[dtype]):
            wanted = need(path, dtype, other, context)
            if wanted.total <= free:
                return (f"Use quantization {other} (its target_quantization or draft_quantization): "
                        f"{gb(wanted.total)} in all.")
    lightest = min(quantization, "nf4", key=lambda q: QUANTIZED_BYTES.get(q, DTYPE_BYTES[dtype]))
    at_one = need(path, dtype, lightest, 1)
    tokens = (free - at_one.weights - ACTIVATIONS_BYTES) // max(at_one.cache, 1)
    if tokens >= 1024:
        return (f"With quantization {lightest}, a context of {tokens:,} tokens fits: ask fewer max new tokens "
                "or a shorter prompt.")
    return (f"Not even in nf4 with a short context: free the card ({gb(total - free)} of it is in use), "
            "or use a smaller model, or device cpu.")


def gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


# ---- a pair found by the scan, before it loads: its files' bytes against this machine's memory ----

# cpu_quant's int4: half a byte a weight, with a bfloat16 scale and zero for each group of 128
INT4_CPU_BYTES = 0.5 + 2 * 2 / 128


def held_bytes(fmt: str, file_bytes: int, parameters: int | None, device: str = "cpu") -> int:
    """What a model holds once loaded as quantization auto loads it: on a CPU, a GGUF about its file's
    bytes (ONNX Runtime's int4 build of it, llama.cpp's mapping of it) and a checkpoint its parameters
    in int4; on CUDA its parameters in bfloat16. Without a parameter count, the bytes on disk."""
    if device == "cuda" and parameters:
        return parameters * DTYPE_BYTES["bfloat16"]
    if fmt == "gguf" or not parameters:
        return file_bytes
    return int(parameters * INT4_CPU_BYTES)


def pair_need(held: list[int], peaks: list[int | None]) -> int:
    """Memory a pair takes at its highest: a build's peak (the builds run before the models are held,
    side by side only where that fits) or both models held, with ACTIVATIONS_BYTES beside."""
    return max([sum(held), *(p for p in peaks if p)]) + ACTIVATIONS_BYTES


def available_bytes(device: str = "cpu") -> int:
    """Memory a load can take now: the system's available memory, or the card's free memory on CUDA."""
    if device == "cuda":
        return free_bytes()[0]
    import psutil

    return int(psutil.virtual_memory().available)
