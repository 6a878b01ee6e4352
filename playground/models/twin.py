"""A random-weight twin of a handle's PyTorch model: what auto times eager's step on while the real
one is unmade.

Making a handle's PyTorch model dequantizes every weight of its GGUF and quantizes it again for the CPU
(92 s for the 1.5B target on 2 cores), and auto needs it only to time one plain step, then usually lets
it go. The int4 and int8 kernels, the embedding lookup, attention and the norms do the same work
whatever the weights' values, so a model of the same config, with the same layer classes, shapes,
groups and packing (cpu_quant.random_for_cpu), times the same step. It is made with initialization
skipped (nothing is written into the float linear layers it replaces), and every value it holds is a
pool of random values repeated: copying a pool runs at memory speed, where drawing 0.65 GB of random
int4 codes for the 1.5B target takes seconds, and the kernels read every byte of every layer's own
memory all the same.
"""

from __future__ import annotations

import copy

import torch

POOL = 1 << 22  # random values drawn per dtype (4 Mi: larger than a core's caches, a few ms to draw)
SEED = 0


def random_twin(config, dtype: torch.dtype, quantization: str):
    """A model of `config` in `dtype` with its linear layers quantized as `quantization` (cpu_quant's
    layers), every weight random, in eval mode; `config` is copied, not changed."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    from playground.models.cpu_quant import Int4Linear, Int8Linear, random_for_cpu

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    noise = pooled_noise(SEED)
    random_for_cpu(model, quantization, noise)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (Int4Linear, Int8Linear)):
                continue  # made random already
            for param in module.parameters(recurse=False):  # left uninitialized: embeddings, maybe norms
                # a norm's scale (1-D) at its neutral 1; a bias of 1 costs what any bias does
                fill = noise(tuple(param.shape), param.dtype) if param.dim() > 1 else torch.ones_like(param)
                param.copy_(fill)
    return model.eval()


def pooled_noise(seed: int):
    """(shape, dtype) -> a new tensor of random values: one pool per dtype, drawn once and repeated.
    Integers take every value of their type (any byte is a valid pair of int4 codes); floats are
    normal with a weight's spread (0.02), so activations stay finite through the layers."""
    generator = torch.Generator().manual_seed(seed)
    pools: dict[torch.dtype, torch.Tensor] = {}

    def pool(dtype: torch.dtype) -> torch.Tensor:
        if dtype not in pools:
            if dtype.is_floating_point:
                pools[dtype] = (torch.randn(POOL, generator=generator) * 0.02).to(dtype)
            else:
                info = torch.iinfo(dtype)
                pools[dtype] = torch.randint(info.min, info.max + 1, (POOL,), generator=generator,
                                             dtype=dtype)
        return pools[dtype]

    def noise(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        out, source = torch.empty(shape, dtype=dtype), pool(dtype)
        flat = out.view(-1)
        for start in range(0, flat.numel(), POOL):
            part = flat[start:start + POOL]
            part.copy_(source[:part.numel()])
        return out

    return noise
