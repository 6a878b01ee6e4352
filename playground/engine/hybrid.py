"""A hybrid drafter: a drafter that costs no forward first, the draft model only where it has nothing.

llama.cpp combines its draft types this way (n-gram caches before the draft model). Copied spans
(edits, code that repeats its identifiers) are caught by the suffixes for free; fluent new text,
where they find no match, is drafted by the model. Each step's proposal comes whole from one of
the two, so its q is that drafter's q and Algorithm 1 applies unchanged.
"""

from __future__ import annotations

from playground.config import CHAIN
from playground.engine.drafters import Draft
from playground.engine.memory import drafter_bytes


class HybridDrafter:
    """`first` (a chain drafter with no model) when it proposes anything, else `fallback`."""

    name = "hybrid"
    speculation = CHAIN

    def __init__(self, first, fallback):
        if first.speculation != CHAIN or fallback.speculation != CHAIN:
            raise ValueError("speculation must be 'chain' for a hybrid drafter (its two drafters' trees "
                             "would need one tree made of both)")
        self.first, self.fallback = first, fallback
        self.vocab_size, self.device = fallback.vocab_size, fallback.device
        self.fell_back = 0  # proposals the draft model made: how much of the run was not free

    def begin(self, ids: list[int]) -> None:
        self.first.begin(ids)
        self.fallback.begin(ids)

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        draft = self.first.propose(ids, k, sampling, generator, min_confidence, stop_tokens)
        if draft.tokens:
            return draft
        self.fell_back += 1
        return self.fallback.propose(ids, k, sampling, generator, min_confidence, stop_tokens)

    def resident_bytes(self) -> int:
        return drafter_bytes(self.first) + drafter_bytes(self.fallback)

    def observe(self, tokens, logits) -> None:
        for drafter in (self.first, self.fallback):
            if hasattr(drafter, "observe"):
                drafter.observe(tokens, logits)
