"""What a configuration holds in memory: the weights it runs and the caches and tables it keeps.

Counted from the tensors themselves (each storage once, so tied embeddings count once), not from
the process's resident size, which the allocator's free lists and other loaded models blur. A
drafter that holds memory says so with `resident_bytes()`; one that has none (prompt lookup) adds 0.
The weights a runner loads outside torch are added to its model's (ONNX Runtime's sessions hold a
copy of the built model; llama.cpp maps its GGUF file), beside the torch weights that stay loaded;
their KV memory is not seen here.
"""

from __future__ import annotations

import sys

import torch

# runners that load weights outside torch: each says how much it holds for a model (held_bytes)
OUTSIDE_TORCH = ("playground.engine.runners.onnx_build", "playground.engine.runners.llamacpp")


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and shared weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def model_bytes(model) -> int:
    """A model's parameters and buffers (a quantized linear's packed weights are buffers), and the
    weights a runner loaded for it outside torch."""
    return tensor_bytes([*model.parameters(), *model.buffers()]) + runner_bytes(model)


def runner_bytes(model) -> int:
    """Weights the runners loaded for `model` outside torch (none where no such runner was imported)."""
    return sum(sys.modules[name].held_bytes(model) for name in OUTSIDE_TORCH if name in sys.modules)


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


def build_peak(path, architecture: str) -> int | None:
    """Bytes the int4 ONNX build of a GGUF peaks at (runners/gguf_builder.peak_bytes), where the onnxruntime
    runner would build one on a CPU: an architecture its builder exports here, onnxruntime-genai installed.
    None where no build is made. For the fit of a pair not loaded yet (models/scan/pairing.Memory)."""
    import importlib.util
    from pathlib import Path

    from playground.engine.runners.gguf_builder import peak_bytes
    from playground.engine.runners.onnx_build import BUILT

    if architecture not in BUILT or importlib.util.find_spec("onnxruntime_genai") is None:
        return None
    return peak_bytes(Path(path))
