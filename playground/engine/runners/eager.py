"""The eager runner: transformers' DynamicCache, the model called as is (any full-attention model)."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from playground.engine.runners import module_of


class EagerRunner:
    name = "eager"

    def __init__(self, model, head=None):
        self.model, self.head, self.device = module_of(model), head, model.device
        self.reset()

    def reset(self) -> None:
        # Every layer a full DynamicLayer, even a sliding-window one (Gemma 3): a sliding layer drops
        # what falls out of its window and then cannot be cropped back to a rollback point, while a
        # full one keeps it and the model's sliding-window mask still hides it (greedy output equal
        # to transformers' generate() past the 512-token window).
        self.cache = DynamicCache()
        self.length = 0

    def crop(self, n: int) -> None:
        if self.length > n:
            self.cache.crop(n - self.length)
            self.length = n

    def move(self, prefix: int, picks: list[int]) -> None:
        """Entries `picks` copied to prefix, prefix + 1, ...; it only needs each layer's key and
        value tensors [batch, heads, seq, dim], which every full-attention DynamicLayer has."""
        index = None  # made once, not once per layer: each is a copy from the host
        for layer in self.cache.layers:
            if not isinstance(layer, DynamicLayer) or layer.is_sliding:
                raise ValueError(f"tree verification needs full-attention dynamic cache layers, got {type(layer).__name__}")
            if picks and layer.is_initialized:
                if index is None or index.device != layer.keys.device:
                    index = to_device(torch.tensor(picks), layer.keys.device)
                layer.keys[..., prefix : prefix + len(picks), :] = layer.keys.index_select(-2, index)
                layer.values[..., prefix : prefix + len(picks), :] = layer.values.index_select(-2, index)

    def forward(self, new: list[int], positions, allowed, keep: int) -> torch.Tensor:
        """transformers takes a 4D mask as given (masking_utils returns a 4D mask untouched); an
        additive float mask works for both the eager and the sdpa attention."""
        inputs = dict(input_ids=to_device(torch.tensor([new]), self.device), cache=self.cache, use_cache=True)
        if allowed is not None:
            inputs.update(attention_mask=to_device(additive_mask(allowed, self.model.dtype), self.device),
                          position_ids=to_device(positions[None], self.device))
        self.length += len(new)
        if self.head is not None:
            return self.head(self.model.get_decoder()(**inputs).last_hidden_state[0, -keep:])
        return self.model(**inputs, logits_to_keep=keep).logits[0, -keep:]


def additive_mask(allowed: torch.Tensor, dtype) -> torch.Tensor:
    """[n, kv] booleans -> [1, 1, n, kv] on their device: 0 where allowed, the dtype's lowest value
    elsewhere."""
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on the device without the host waiting for it. On CUDA a copy from pageable memory
    blocks the host until the GPU has caught up (torch's sync debug mode counts it as a sync), so it
    goes from pinned memory, asynchronously: torch's pinned-memory cache records the copy's event on
    the block and hands the block out again only once the copy has read it, so dropping `host` at once
    is safe. Elsewhere a plain copy: pinning needs CUDA, and a CPU tensor stays where it is."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
