"""A causal LM together with its KV cache and the tokens that cache holds.

Rollback is one generic operation, cropping the cache to a prefix, so no model-specific branch
is needed: any transformers cache whose layers support `crop` works.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


class CachedModel:
    """Feeds a model only the tokens its cache has not seen, and rolls the cache back exactly."""

    def __init__(self, model):
        self.model = model
        self.device = model.device
        self.vocab_size = model.config.get_text_config().vocab_size
        self.tokens: list[int] = []  # the tokens whose keys and values are in the cache
        self.cache = DynamicCache(config=model.config)

    def reset(self) -> None:
        self.tokens = []
        self.cache = DynamicCache(config=self.model.config)

    def rollback(self, n: int) -> None:
        """Keep the first n cached tokens, drop the rest (no recompute of the prefix)."""
        drop = len(self.tokens) - n
        if drop > 0:
            self.cache.crop(-drop)
            del self.tokens[n:]

    def common_prefix(self, tokens: list[int]) -> int:
        """How many leading cached tokens `tokens` still agrees with."""
        n = len(self.tokens)
        if tokens[:n] == self.tokens:
            return n
        i = 0
        while i < n and i < len(tokens) and tokens[i] == self.tokens[i]:
            i += 1
        return i

    @torch.inference_mode()
    def logits_for(self, tokens: list[int], keep: int) -> torch.Tensor:
        """Logits after each of the last `keep` positions of `tokens`.  -> [keep, V]

        The cache is first rolled back to what it shares with `tokens` (leaving at least `keep`
        tokens to feed), then only the missing tokens go through the model.
        """
        self.rollback(min(self.common_prefix(tokens), len(tokens) - keep))
        return self.feed(tokens[len(self.tokens) :], keep)

    @torch.inference_mode()
    def feed(self, new: list[int], keep: int) -> torch.Tensor:
        """Run the model on `new` after the cached tokens.  -> [keep, V] (keep >= 1)"""
        ids = torch.tensor([new], device=self.device)
        out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
        self.tokens.extend(new)
        return out.logits[0, -keep:]
