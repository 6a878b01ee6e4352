"""What a configuration holds in memory: the weights it runs and the caches and tables it keeps.

Counted from the tensors themselves (each storage once, so tied embeddings count once), not from
the process's resident size, which the allocator's free lists and other loaded models blur. A
drafter that holds memory says so with `resident_bytes()`; one that has none (prompt lookup) adds 0.
What a runner keeps outside torch (llama.cpp's KV memory, ONNX Runtime's buffers and weights) is
not seen here, so a report names its runner beside these numbers.
"""

from __future__ import annotations

import torch


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and shared weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def model_bytes(model) -> int:
    """A model's parameters and buffers (a quantized linear's packed weights are buffers)."""
    return tensor_bytes([*model.parameters(), *model.buffers()])


def cache_bytes(cache) -> int:
    """A torch KV cache: each layer's keys and values (a static cache counts its capacity, an empty
    layer, such as one a self-drafter skips, nothing)."""
    layers = getattr(cache, "layers", None) or ()
    return tensor_bytes(t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None)))


def cached_model_bytes(lm) -> int:
    """A CachedModel's weights and KV cache: what a second model costs in memory."""
    return model_bytes(lm.model) + cache_bytes(lm.cache)


def drafter_bytes(drafter) -> int:
    """What a drafter adds to the target's memory: its own weights, cache and tables."""
    own = getattr(drafter, "resident_bytes", None)
    return int(own()) if own is not None else 0
