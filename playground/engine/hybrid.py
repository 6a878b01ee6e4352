"""A hybrid drafter: a drafter that costs no forward first, the draft model only where it has nothing.

llama.cpp combines its draft types this way (n-gram caches before the draft model). Copied spans
(edits, code that repeats its identifiers) are caught by the suffixes for free; fluent new text,
where they find no match, is drafted by the model. Each step's proposal comes whole from one of
the two, so its q is that drafter's q and Algorithm 1 applies unchanged; as chains, or as trees
(the suffixes' tree where they match, else the draft model's), whose verification (SpecInfer's)
likewise takes each tree with the q it was drawn from.
"""

from __future__ import annotations

from playground.engine.drafters import Draft, TreeDraft
from playground.engine.memory import drafter_bytes


class HybridDrafter:
    """`first` (a drafter with no model) when it proposes anything, else `fallback`; both chains or
    both trees."""

    name = "hybrid"

    def __init__(self, first, fallback):
        if first.speculation != fallback.speculation:
            raise ValueError(f"speculation: a hybrid drafter's two drafters must both draft chains or both "
                             f"trees, got {first.speculation!r} and {fallback.speculation!r}")
        self.first, self.fallback = first, fallback
        self.speculation = first.speculation
        self.vocab_size, self.device = fallback.vocab_size, fallback.device
        self.depth = getattr(fallback, "depth", None)  # a tree's levels, as the engine reads them
        self.fell_back = 0  # proposals the draft model made: how much of the run was not free

    def begin(self, ids: list[int]) -> None:
        self.first.begin(ids)
        self.fallback.begin(ids)

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        draft = self.first.propose(ids, k, sampling, generator, min_confidence, stop_tokens)
        if proposed(draft):
            return draft
        self.fell_back += 1
        return self.fallback.propose(ids, k, sampling, generator, min_confidence, stop_tokens)

    def resident_bytes(self) -> int:
        return drafter_bytes(self.first) + drafter_bytes(self.fallback)

    def observe(self, tokens, logits) -> None:
        for drafter in (self.first, self.fallback):
            if hasattr(drafter, "observe"):
                drafter.observe(tokens, logits)


def proposed(draft: Draft | TreeDraft) -> bool:
    """Whether a proposal holds any token."""
    return bool(draft.tree.tokens if isinstance(draft, TreeDraft) else draft.tokens)
