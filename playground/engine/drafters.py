"""Drafters: whatever proposes the next tokens for the target to verify.

One small protocol for chains and trees: `begin(ids)` once per prompt, then `propose(ids, k, ...)`
each step. `speculation` says what a proposal is: CHAIN, a Draft of up to k tokens and q, the
distribution each was drawn from (None when the drafter is deterministic, i.e. q is one-hot on
the proposed token); TREE, a TreeDraft of at most k levels, every node verified in one forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from playground.engine.kvcache import CachedModel
from playground.engine.runners.choice import DRAFT
from playground.engine.memory import cached_model_bytes
from playground.config import CHAIN, KNOBS, check_value
from playground.engine.sampling import Sampling, display_probs, pick
from playground.engine.tree import Tree


@dataclass(frozen=True)
class Draft:
    """A chain drafter's proposal."""

    tokens: list[int]
    q: torch.Tensor | None  # [len(tokens), V] probabilities; None means one-hot on each token
    source: str = ""  # a drafter of several sources (the hybrid): which one drafted this step
    why: str = ""  # and why it was chosen, for the step-through and the race's hover


@dataclass(frozen=True)
class TreeDraft:
    """A tree drafter's proposal."""

    tree: Tree
    q: torch.Tensor | None  # [n+1, V]: row 0 the draft's q after the context, row i+1 after node i
    # (zeros for leaves); None: deterministic candidates, each tried with its own one-hot q
    forwards: int  # draft forwards spent: one per depth that was expanded


@runtime_checkable
class Drafter(Protocol):
    """What the engine drives; generate() dispatches on `speculation`, nothing else. A tree
    drafter also has `depth`, the levels it drafts: a tree step's lookahead in its event.

    A drafter that learns from the target may also have `observe(tokens, logits)`: called after
    every verification with the target's raw logits, logits[i] being what the target predicted
    after tokens[i] on that token's own path (tokens[0] is the last context token, then the
    drafted tokens or tree nodes in order). Its time counts as drafting time.

    A chain drafter that sets its own lengths (the hybrid) may have `reach`, the most tokens it may
    propose whatever γ (the engine caps it: generate.reach_of), and `plan(new_tokens)`, told the run's
    budget after begin() so it can spread one-time costs over the steps left."""

    name: str
    speculation: str  # config.CHAIN: propose returns a Draft; config.TREE: a TreeDraft
    vocab_size: int | None  # width of q, or None when q is one-hot
    device: torch.device | None  # where its generator lives; None when it draws no randomness

    def begin(self, ids: list[int]) -> None: ...

    def propose(
        self,
        ids: list[int],
        k: int,  # a chain: the most tokens; a tree: the most levels
        sampling: Sampling,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
        stop_tokens: frozenset[int] = frozenset(),
    ) -> Draft | TreeDraft: ...


class ModelDrafter:
    """A small causal LM drafting autoregressively with its own KV cache.

    Its cache is rolled back to the longest prefix it shares with the verified context at the
    start of each proposal, so rejected tokens are dropped without recomputing the prefix.
    """

    name = "draft model"
    speculation = CHAIN

    def __init__(self, model, vocab_size: int | None = None, draft_vocab: int | None = None, runner: str = "auto"):
        """vocab_size: the target's logit width, when known: the draft drafts only among ids the
        target has (a wider draft's extra rows, padding in practice, get q = 0 and the rest is
        renormalised; a narrower draft's q is zero past its own width, the engine pads it).
        draft_vocab: draft only among the first N token ids (q = 0 for the rest), which makes
        each draft forward cheaper. Still lossless: the target's residual covers what q leaves out;
        a target token outside the range is simply never drafted, so acceptance can drop."""
        self.lm = CachedModel(model, head_rows=draft_vocab, runner=runner, role=DRAFT)
        self.vocab_size = drafted_width(self.lm.head_rows or self.lm.vocab_size, vocab_size)
        self.device = self.lm.device

    def begin(self, ids: list[int]) -> None:
        self.lm.reset()  # the first proposal reads the prompt

    def resident_bytes(self) -> int:
        return cached_model_bytes(self.lm)

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        """Draft k tokens; stop early once the draft's top probability falls under min_confidence,
        or after an end-of-turn token (nothing after it can be emitted)."""
        tokens, rows, ids = [], [], readable(ids, self.lm.vocab_size)
        for _ in range(k):
            logits = self.lm.logits_for(ids + tokens, keep=1)[-1, : self.vocab_size]
            q = display_probs(logits, sampling)  # processed q; softmax when greedy
            tokens.append(pick(q, sampling, generator))
            rows.append(q)
            if tokens[-1] in stop_tokens or (min_confidence > 0 and float(q.max()) < min_confidence):
                break
        return Draft(tokens, torch.stack(rows) if rows else None)


def drafted_width(draft_width: int, target_width: int | None) -> int:
    """Width of a draft model's q: its own logits (a cut head's rows: q is zero past them, and the
    engine pads q to p's width once a step instead of a softmax over the whole width per token),
    cut to the target's where the target is narrower."""
    return min(draft_width, target_width) if target_width else draft_width


STAND_IN = 0  # what a draft reads in place of a target id it has no embedding for


def readable(ids: list[int], rows: int) -> list[int]:
    """The context as a draft with `rows` embedding rows can read it: a target id past them (a
    narrower draft's vocabulary) becomes a stand-in. Still lossless: q may be any distribution the
    tokens are drawn from, and one conditioned on a stand-in is only a worse guess."""
    if not ids or max(ids) < rows:
        return ids
    return [t if t < rows else STAND_IN for t in ids]


class PromptLookupDrafter:
    """Prompt lookup decoding: find the latest earlier occurrence of the context's last n-gram
    and propose the tokens that followed it. No second model; q is one-hot.
    """

    name = "prompt lookup"
    speculation = CHAIN
    vocab_size = None
    device = None  # deterministic: no generator

    def __init__(self, min_ngram: int = KNOBS["ngram_min"].default,
                 max_ngram: int = KNOBS["ngram_max"].default):
        check_value(KNOBS["ngram_min"], min_ngram)  # the run configuration's names and ranges
        check_value(KNOBS["ngram_max"], max_ngram, {"ngram_min": min_ngram})
        self.min_ngram, self.max_ngram = min_ngram, max_ngram

    def begin(self, ids: list[int]) -> None:
        pass

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            start = find_previous_ngram(ids, n)
            if start is not None:
                return Draft(cut_after_stop(ids[start : start + k], stop_tokens), None)
        return Draft([], None)


def cut_after_stop(tokens: list[int], stop_tokens) -> list[int]:
    """Tokens up to and including the first end-of-turn token."""
    for i, token in enumerate(tokens):
        if token in stop_tokens:
            return tokens[: i + 1]
    return tokens


def find_previous_ngram(ids: list[int], n: int) -> int | None:
    """Index right after the latest earlier occurrence of ids[-n:], or None.  Longer n first is
    the caller's job; the latest match is the likeliest to continue the way the text is going.
    """
    if len(ids) <= n:
        return None
    tail = ids[-n:]
    for i in range(len(ids) - n - 1, -1, -1):
        if ids[i : i + n] == tail:
            return i + n
    return None
