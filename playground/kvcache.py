"""A causal LM together with its KV cache and the tokens that cache holds.

Rollback is one generic operation, cropping the cache to a prefix, so no model-specific branch
is needed: any transformers cache whose layers support `crop` works.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


class CachedModel:
    """Feeds a model only the tokens its cache has not seen, and rolls the cache back exactly.

    head_rows: compute logits only for token ids below it (the others get -inf, probability 0).
    The output layer of a small model is a large share of its forward (Qwen2.5-0.5B: 17 of about
    45 ms on a 2-core CPU, for 152k rows), and BPE ids run roughly from frequent to rare.
    """

    def __init__(self, model, head_rows: int | None = None):
        self.model = model
        self.device = model.device
        self.vocab_size = model.config.get_text_config().vocab_size
        self.tokens: list[int] = []  # the tokens whose keys and values are in the cache
        self.cache = DynamicCache(config=model.config)
        self.head = None if head_rows is None else trimmed_head(model, head_rows)

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
        if self.head is not None:
            hidden = self.model.get_decoder()(input_ids=ids, cache=self.cache, use_cache=True).last_hidden_state
            self.tokens.extend(new)
            return self.head(hidden[0, -keep:])
        out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
        self.tokens.extend(new)
        return out.logits[0, -keep:]


def trimmed_head(model, rows: int):
    """hidden [n, H] -> logits [n, V] from the first `rows` rows of the output layer, -inf after.

    Only for a plain linear head on the decoder's output; checked once against the model's own
    logits, so a model that scales or caps its logits is refused rather than drafted wrongly."""
    linear = model.get_output_embeddings()
    vocab = linear.out_features
    if not 1 <= rows <= vocab:
        raise ValueError(f"draft_vocab must be in [1, {vocab}] for this draft, got {rows}")
    # a quantized head (cpu_quant) keeps its first rows quantized; a plain one is sliced
    first = linear.first_rows(rows) if hasattr(linear, "first_rows") else None
    weight = None if first is not None else linear.weight[:rows]

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = hidden.new_full((hidden.shape[0], vocab), float("-inf"))
        logits[:, :rows] = first(hidden) if first is not None else hidden @ weight.T
        return logits

    with torch.inference_mode():
        probe = torch.tensor([[0, 1]], device=model.device)
        full = model(input_ids=probe).logits[0, :, :rows]
        mine = head(model.get_decoder()(input_ids=probe).last_hidden_state[0])[:, :rows]
    if getattr(linear, "bias", None) is not None or not torch.allclose(full.float(), mine.float(), atol=1e-3,
                                                                        rtol=1e-2):
        raise ValueError("draft_vocab needs a draft whose logits are a plain linear layer of its last "
                         f"hidden state; {type(model).__name__} transforms them further")
    return head
