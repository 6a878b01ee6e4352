"""A causal LM together with its KV cache and the tokens that cache holds.

Rollback is one generic operation, cropping the cache to a prefix, so no model-specific branch
is needed; the runner (engine/runners) owns the cache and says how a crop is done.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from playground.engine.runners import LLAMACPP, ONNXRUNTIME, make_runner, resolve
from playground.engine.runners.choice import TARGET
from playground.engine.tree import Tree, attention_mask, tree_positions


class CachedModel:
    """Feeds a model only the tokens its cache has not seen, and rolls the cache back exactly.

    head_rows: compute logits only for token ids below it (the others get -inf, probability 0).
    The output layer of a small model is a large share of its forward (Qwen2.5-0.5B: 17 of about
    45 ms on a 2-core CPU, for 152k rows), and BPE ids run roughly from frequent to rare.
    runner: how the forward runs and where the cache lives (a name engine/runners resolves); this
    class only decides what to feed and what to keep. role: "target" (it verifies) or "draft", which
    with each run's length (`run_on`) says which of auto's measured choices it runs on.
    """

    def __init__(self, model, head_rows: int | None = None, runner: str = "auto", tree: bool = False,
                 role: str = TARGET):
        self.model = model
        self.device = model.device
        self.vocab_size = model.config.get_text_config().vocab_size
        self.tokens: list[int] = []  # the tokens whose keys and values are in the cache
        self.head_rows = head_rows  # None: the whole output layer
        self.asked, self.tree, self.role = runner, tree, role  # tree: it will be fed token trees
        self.runner = None
        self.run_on(None)

    def run_on(self, context: int | None) -> None:
        """The runner for a run of `context` entries (None: a short one): under auto, the one measured
        fastest for this role at that length (runners.resolve); made anew, with an empty cache, where it
        is not the one this model runs on now."""
        kind = resolve(self.asked, self.device, self.tree, self.model, self.head_rows, context, self.role)
        if self.runner is not None and self.runner.name == kind:
            return
        self.head = None if self.head_rows is None else head_for(self.model, self.head_rows, kind)
        self.runner = make_runner(self.model, kind, self.head, self.tree)
        self.tokens = []

    @property
    def cache(self):
        return self.runner.cache

    def reset(self) -> None:
        self.tokens = []
        self.runner.reset()

    def expect(self, entries: int) -> None:
        """A run of this many entries starts: a runner whose cache has a fixed capacity takes one that
        holds them all now (runners/static.StaticRunner.expect); the others grow as they go."""
        expect = getattr(self.runner, "expect", None)
        if expect is not None:
            expect(entries)

    def rollback(self, n: int) -> None:
        """Keep the first n cached tokens, drop the rest (no recompute of the prefix)."""
        if len(self.tokens) > n:
            self.runner.crop(n)
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
    def keep_path(self, prefix: int, nodes: list[int]) -> None:
        """After a tree forward: keep the first `prefix` cached tokens and then only the entries of
        `nodes` (indices counted after the prefix, root first), moved into place; no recompute.

        The tree's counterpart of rollback, and as generic: the runner copies each layer's kept
        key and value rows into place."""
        picks = [prefix + i for i in nodes]
        self.runner.move(prefix, picks)
        self.tokens[prefix : prefix + len(picks)] = [self.tokens[i] for i in picks]
        self.rollback(prefix + len(picks))

    @torch.inference_mode()
    def logits_for_tree(self, context: list[int], tree: Tree) -> torch.Tensor:
        """Logits after the context and after every tree node, in one forward.  -> [n+1, V]

        Row 0 is the distribution after the context, row i+1 after node i. The cache keeps the
        context and every node afterwards; keep_path then leaves only the accepted ones."""
        self.rollback(min(self.common_prefix(context), len(context) - 1))
        cached = len(self.tokens)
        allowed = attention_mask(tree, len(context), cached)
        positions = torch.cat([torch.arange(cached, len(context)), tree_positions(tree, len(context))])
        return self.feed_masked(context[cached:] + list(tree.tokens), positions, allowed, len(tree) + 1)

    @torch.inference_mode()
    def feed_masked(self, new: list[int], positions: torch.Tensor, allowed: torch.Tensor, keep: int) -> torch.Tensor:
        """Like feed, with an explicit attention pattern and position ids: allowed [len(new), kv]
        (kv = cached + len(new)) says which cached or new entries each new token may see."""
        logits = self.runner.forward(new, positions, allowed, keep)
        self.tokens.extend(new)
        return logits

    @torch.inference_mode()
    def feed(self, new: list[int], keep: int) -> torch.Tensor:
        """Run the model on `new` after the cached tokens.  -> [keep, V] (keep >= 1)"""
        logits = self.runner.forward(new, None, None, keep)
        self.tokens.extend(new)
        return logits


# Runners that cut the output layer themselves (onnxruntime into its build, llamacpp by masking):
# they need the row count only, and a model handle keeps its PyTorch form unmade for them.
OWN_HEADS = (ONNXRUNTIME, LLAMACPP)


@dataclass(frozen=True)
class HeadRows:
    """A cut head as a runner that cuts its own sees it: its first `rows` rows."""

    rows: int


def head_for(model, rows: int, runner: str):
    """The head a runner of kind `runner` computes the first `rows` rows of the logits with."""
    if runner not in OWN_HEADS:
        return trimmed_head(model, rows)
    vocab = model.config.get_text_config().vocab_size
    if not 1 <= rows <= vocab:
        raise ValueError(f"draft_vocab must be in [1, {vocab}] for this draft, got {rows}")
    return HeadRows(rows)


def trimmed_head(model, rows: int) -> "TrimmedHead":
    """hidden [n, H] -> logits [n, V] from the first `rows` rows of the output layer, -inf after.

    Only for a plain linear head on the decoder's output; checked once against the model's own
    logits, so a model that scales or caps its logits is refused rather than drafted wrongly."""
    linear = model.get_output_embeddings()
    vocab = linear.out_features
    if not 1 <= rows <= vocab:
        raise ValueError(f"draft_vocab must be in [1, {vocab}] for this draft, got {rows}")
    head = TrimmedHead(linear, rows)
    with torch.inference_mode():
        probe = torch.tensor([[0, 1]], device=model.device)
        full = model(input_ids=probe).logits[0, :, :rows]
        mine = head(model.get_decoder()(input_ids=probe).last_hidden_state[0])[:, :rows]
    if getattr(linear, "bias", None) is not None or not torch.allclose(full.float(), mine.float(), atol=1e-3,
                                                                        rtol=1e-2):
        raise ValueError("draft_vocab needs a draft whose logits are a plain linear layer of its last "
                         f"hidden state; {type(model).__name__} transforms them further")
    return head


class TrimmedHead(torch.nn.Module):
    """The output layer cut to its first `rows` rows, as a module rather than a closure: its weight
    is a buffer (a view of the model's own rows, nothing copied), which torch.compile treats as
    state at a fixed address. A tensor a closure holds is a graph input instead, and CUDA graphs copy
    every input into a buffer of their own on each replay (117 MB a step for 65,536 x 896 in bf16,
    kept twice)."""

    def __init__(self, linear, rows: int):
        super().__init__()
        self.rows = rows  # a compiled runner keeps one step per row count
        self.vocab = linear.out_features
        # a quantized head (cpu_quant) keeps its first rows quantized, as a submodule; a plain one is sliced
        self.first = linear.first_rows(rows) if hasattr(linear, "first_rows") else None
        weight = None if self.first is not None else linear.weight[:rows].detach()
        self.register_buffer("weight", weight, persistent=False)
        if weight is not None and not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(weight)  # said outright: a graph reads it in place

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = hidden.new_full((hidden.shape[0], self.vocab), float("-inf"))
        logits[:, : self.rows] = self.first(hidden) if self.first is not None else hidden @ self.weight.T
        return logits
