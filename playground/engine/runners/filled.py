"""Attention over the filled part of a static cache, its key and value heads read where they lie.

A StaticCache hands each layer's attention its whole buffer, [1, kv heads, capacity, dim], filled or
not; transformers' sdpa path then repeats every key and value head for the query heads sharing it
(repeat_kv: always under torch.compile, and for any step of several rows), a copy over the whole
capacity in every layer at every step: about 0.37 MB an entry for the 1.5B, 0.86 MB for a 7B, so at
16k entries a step copied about a 7B's own weights.

The static step's mask says instead how far its attention reads: it is `span` entries wide (the
filled length on a short lattice, static.span_of), and `filled_attention` reads the keys and values
up to it and no further (a view, nothing copied). The query heads that share a key head are laid one
after the other as rows of one grouped query ([1, kv heads, groups x rows, dim]), the mask repeated
for them (rows x span, not the keys' heads x span x dim), so scaled_dot_product_attention runs on
the cache's own heads: plain 4D inputs any of its kernels takes with a mask, on every device, where
its `enable_gqa` runs the math kernel, which repeats the keys itself, as soon as a mask is given on
CUDA. transformers does the same for a single row outside torch.compile (pack_gqa).

It is registered with transformers' AttentionInterface and put in the place of a model's sdpa
attention when a static runner first steps in it (`attends_filled`); every call the static step does
not mark (an eager runner's forward on the same model, generate(), a prompt of another runner) goes
to transformers' sdpa as before, and builds sdpa's masks (the name is registered there too).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

FILLED = "playground_filled"  # the attention implementation a static runner's model attends with


def filled_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
                     filled: bool = False, **kwargs):
    """query [1, heads, n, dim], key and value [1, kv heads, buffer, dim], attention_mask [1, 1, n, span]
    (additive) -> ([1, n, heads, dim], None), as transformers' attention functions return. `filled`: the
    static step's call (static.step), whose mask is as wide as what it reads; any other is sdpa's. kwargs:
    transformers' (scaling, dropout, ...)."""
    if not filled:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    batch, heads, n, dim = query.shape
    kv_heads, span = key.shape[1], attention_mask.shape[-1]
    groups = heads // kv_heads  # head h reads key head h // groups (repeat_kv's order)
    grouped = query.reshape(batch, kv_heads, groups * n, dim)  # row g * n + i: head kv * groups + g, row i
    mask = attention_mask.repeat(1, 1, groups, 1) if groups > 1 else attention_mask
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key[:, :, :span], value[:, :, :span], attn_mask=mask, dropout_p=kwargs.get("dropout", 0.0),
        scale=kwargs.get("scaling"))
    return out.reshape(batch, heads, n, -1).transpose(1, 2).contiguous(), None


def attends_filled(model) -> bool:
    """Whether the model's static steps read only what they span: its sdpa attention is made
    filled_attention (sdpa itself for every call but the static step's), once; a model on another
    attention (eager, a flash kernel) keeps it, and its static steps' masks span the whole capacity."""
    config = model.config
    if config._attn_implementation == "sdpa":
        AttentionInterface.register(FILLED, filled_attention)  # a dict's update: once or again alike
        AttentionMaskInterface.register(FILLED, sdpa_mask)  # the masks of unmarked forwards: sdpa's
        config._attn_implementation = FILLED
    return config._attn_implementation == FILLED
