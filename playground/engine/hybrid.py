"""A hybrid drafter: each step, the proposal expected to pay most per second, from the suffixes or the draft model.

A fixed order (the suffixes whenever they match, however short, the draft model where they find
nothing, each capped at γ) was measured worse than both its parts (docs/benchmarks.md): a weak
one-token match displaced a draft model that would have been accepted, and a long copied span was
drafted γ tokens at a time. Here each chain step weighs the suffixes' proposal at every length up
to its own (MAX_SPEC = α · match length: past the draft model's γ), the draft model at each
length up to γ, and a plain step, by expected tokens per second (payoff.py), with α, the draft's
seconds and the target's verification seconds measured in this run. The engine lets the proposal run past γ
(`reach`), never past the tokens left to generate.

Each proposal comes whole from one source, so its q is the one it was drawn from (one-hot for the
suffixes, the draft model's own) and Algorithm 1 applies unchanged: sampled runs stay lossless.
A run's choices follow the times it measures, so two sampled runs of one seed may draft
differently; their output follows the target's distribution all the same, and a greedy run's is
the target's own token for token. Trees keep the fixed order (the suffixes' tree where they match,
else the draft model's), whose verification (SpecInfer's) takes each tree with the q it was drawn from.
"""

from __future__ import annotations

import time
from dataclasses import replace

from playground.config import TREE
from playground.engine.drafters import Draft, TreeDraft
from playground.engine.memory import drafter_bytes
from playground.engine.payoff import (MODEL, PRIOR_ALPHA, PRIOR_WEIGHT, SUFFIX, Acceptance, Timings, best, choices,
                                      match_class)
from playground.engine.universal import common_prefix

CATCH_UP = 4  # a draft model call that first reads more rows than this is a prefill, not a step's cost


class HybridDrafter:
    """`first` (a drafter with no model: the suffixes) and `fallback` (the draft model), both chains
    or both trees; a chain step drafts from whichever pays most, a tree step from `first` when it
    proposes anything."""

    name = "hybrid"

    def __init__(self, first, fallback, clock=time.perf_counter):
        if first.speculation != fallback.speculation:
            raise ValueError(f"speculation: a hybrid drafter's two drafters must both draft chains or both "
                             f"trees, got {first.speculation!r} and {fallback.speculation!r}")
        self.first, self.fallback, self.clock = first, fallback, clock
        self.speculation = first.speculation
        self.vocab_size, self.device = fallback.vocab_size, fallback.device
        self.depth = getattr(fallback, "depth", None)  # a tree's levels, as the engine reads them
        self.reach = getattr(first, "max_spec", 0)  # the engine may take a chain this long, whatever γ
        self.fell_back = 0  # proposals the draft model made: how much of the run was not free
        self.begin_run()

    def begin_run(self) -> None:
        """What a run learns, forgotten at its start: α per source, the seconds it measured."""
        self.timings = Timings()
        self.alphas = {MODEL: Acceptance(PRIOR_ALPHA[MODEL], PRIOR_WEIGHT[MODEL])}  # the suffixes': one per match class
        self.last = None  # (source key, context length, tokens drafted, when the proposal left)
        self.model_fed = None  # (context length, its own drafts read) at the draft model's last call
        self.verified = 0  # verifications seen: the first read the prompt, not a step's rows
        self.end = 0  # the context's length when the run is done (plan): what is left spreads one-time costs

    def begin(self, ids: list[int]) -> None:
        self.begin_run()
        self.end = len(ids)
        self.first.begin(ids)
        self.fallback.begin(ids)

    def plan(self, new_tokens: int) -> None:
        """The run will generate at most new_tokens (the engine says so after begin)."""
        self.end += new_tokens

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft | TreeDraft:
        self.learn(ids)
        if self.speculation == TREE:
            return self.propose_tree(ids, k, sampling, generator, min_confidence, stop_tokens)
        suffix = self.first.propose(ids, max(k, self.reach), sampling, generator, min_confidence, stop_tokens)
        matched = getattr(self.first, "matched", len(suffix.tokens))
        key = (SUFFIX, match_class(matched))
        alpha = self.alphas.setdefault(key, Acceptance(PRIOR_ALPHA[SUFFIX], PRIOR_WEIGHT[SUFFIX]))
        behind = self.unread(ids)
        choice = best(choices(self.timings, alpha.alpha, len(suffix.tokens), self.alphas[MODEL].alpha, k, behind=behind,
                              prompt=behind if self.model_fed is None else 0, left=self.end - len(ids)))
        if choice.source == MODEL:
            draft, key = self.model_proposal(ids, choice.length, sampling, generator, min_confidence, stop_tokens), MODEL
        else:
            draft = Draft(suffix.tokens[: choice.length], None)
        self.last = (key, len(ids), draft.tokens, self.clock())
        return replace(draft, source=choice.source, why=choice.why(matched))

    def unread(self, ids: list[int]) -> int:
        """Rows the draft model reads first in its next forward: the context past what its cache holds
        (the context at its last call and its own drafts that were kept; it read each but the last)."""
        if self.model_fed is None:
            return len(ids)
        start, fed = self.model_fed
        return len(ids) - start - common_prefix(ids[start:], fed)

    def model_proposal(self, ids, k, sampling, generator, min_confidence, stop_tokens) -> Draft:
        """The draft model's k tokens (at most), timed: its forward's seconds, where the call was a step's
        (not a prefill of many new rows), join the run's timings."""
        self.fell_back += 1
        read, start = self.unread(ids), self.clock()
        draft = self.fallback.propose(ids, k, sampling, generator, min_confidence, stop_tokens)
        if self.model_fed is not None and read <= CATCH_UP:
            self.timings.add_model(len(draft.tokens), read, self.clock() - start)
        self.model_fed = (len(ids), list(draft.tokens[:-1]))
        return draft

    def propose_tree(self, ids, k, sampling, generator, min_confidence, stop_tokens) -> TreeDraft:
        draft = self.first.propose(ids, k, sampling, generator, min_confidence, stop_tokens)
        if draft.tree.tokens:
            return draft
        self.fell_back += 1
        return self.fallback.propose(ids, k, sampling, generator, min_confidence, stop_tokens)

    def learn(self, ids: list[int]) -> None:
        """The last chain's verdict, read from the context it left: the accepted drafts are the
        new tokens it shares with the proposal (a rejected token's replacement is never the token
        rejected: the residual gives it no mass)."""
        if self.last is None or len(ids) <= self.last[1]:
            return
        key, start, drafted, _ = self.last
        if drafted:
            self.alphas[key].add(common_prefix(ids[start:], drafted), len(drafted))
        self.last = None

    def observe(self, tokens, logits) -> None:
        """After each verification: its seconds (the rows it read, from the proposal's end to here;
        the first step's, which read the prompt, is not a step's) and, for parts that learn, the logits."""
        if self.last is not None:
            key, start, _, sent = self.last
            if self.verified > 0:
                self.timings.add_verify(len(tokens), self.clock() - sent)
            else:  # the first forward read the prompt and the drafts: the target's prefill rate
                self.timings.prefill_token = (self.clock() - sent) / (start + len(tokens) - 1)
            self.last = (key, start, list(tokens[1:]), sent)  # what was verified: the engine may cut a proposal
        self.verified += 1
        for drafter in (self.first, self.fallback):
            if hasattr(drafter, "observe"):
                drafter.observe(tokens, logits)

    def resident_bytes(self) -> int:
        return drafter_bytes(self.first) + drafter_bytes(self.fallback)
