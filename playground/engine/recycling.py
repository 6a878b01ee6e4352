"""Token Recycling: a drafter with no model, drafting from what the target itself predicted before.

Luo et al. 2025, "Turning Trash into Treasure: Accelerating Inference of Large Language Models with
Token Recycling" (ACL 2025). Every verification forward already computes the target's logits after
every drafted token, the rejected ones included; plain speculative decoding throws those away. Token
Recycling keeps the top-k of each row in an *adjacency matrix* M [V, k]: M[t] holds the k tokens the
target most recently ranked highest after token t. A proposal grows a draft tree from the last
context token by breadth-first search over M (children of a node with token t: M[t][:b], b the
branching at that depth), along a fixed shape (a node budget, a depth, the branching per depth);
the next verification refreshes M from its own logits (`observe`), with no extra forward at all.

The matrix is kept across prompts (the paper's hot start): `begin` does not clear it, `reset` does.
Candidates are deterministic (q None): the engine tries each with its own one-hot q, exact for any
rule that picks them from the past only, which M does.
"""

from __future__ import annotations

from typing import Sequence

import torch

from playground.config import CHAIN, KNOBS, TREE, KnobError, check_int, check_value
from playground.engine.drafters import Draft, TreeDraft, cut_after_stop
from playground.engine.memory import tensor_bytes
from playground.engine.tree import ROOT, Tree

PAPER_TOP_K = 8  # next tokens the paper keeps per token
MAX_TOP_K = 32  # past a few dozen the table only costs memory
MAX_VOCAB = 1 << 24  # rows of the table; every released tokenizer is far below this


class TokenRecyclingDrafter:
    """Drafts chains or trees from the adjacency matrix of the target's own recent top-k."""

    name = "token recycling"
    vocab_size = None  # q is one-hot: the engine never trims the target's logits for this drafter
    device = None  # deterministic: no generator

    def __init__(self, vocab_size: int, speculation: str = TREE, top_k: int | None = None,
                 budget: int = KNOBS["tree_budget"].default, depth: int = KNOBS["tree_depth"].default,
                 branching: int | Sequence[int] = KNOBS["tree_branching"].default):
        """vocab_size: rows of the matrix (the target's vocabulary width; larger ids get no row).
        top_k: next tokens kept per row; None: the paper's 8, or the widest branching if wider.
        branching: children per node, one number for every depth or one per depth (the paper's
        tree is wide at the root, narrow below)."""
        check_int("vocab_size", vocab_size, low=1, high=MAX_VOCAB)
        check_value(KNOBS["speculation"], speculation)
        if top_k is None:  # wide enough for every branching the run allows (bad values are refused below)
            widths = branching if isinstance(branching, (tuple, list)) else (branching,)
            widest = max((b for b in widths if isinstance(b, int)), default=0)
            top_k = min(max(PAPER_TOP_K, widest), MAX_TOP_K, vocab_size)
        check_int("top_k", top_k, low=1, high=min(MAX_TOP_K, vocab_size))
        for name, value in (("budget", budget), ("depth", depth)):
            check_value(KNOBS[f"tree_{name}"], value)
        self.speculation, self.top_k, self.budget, self.depth = speculation, top_k, budget, depth
        self.branching = per_depth_branching(branching, depth, top_k)
        self.rows = vocab_size
        self.reset()

    def reset(self) -> None:
        """Forget everything recycled so far (begin() keeps it: the paper's hot start)."""
        self.table = torch.zeros(self.rows, self.top_k, dtype=torch.int32)
        self.known = torch.zeros(self.rows, dtype=torch.bool)
        self.columns = self.top_k  # filled columns of a known row (fewer only when logits are narrower)

    def resident_bytes(self) -> int:
        """The adjacency table and its known-rows mask."""
        return tensor_bytes([self.table, self.known])

    def begin(self, ids: list[int]) -> None:
        pass  # the matrix carries over from earlier prompts

    # -- update: recycle the verification's logits ------------------------------------------------

    def observe(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Refresh M[t] for every token t the target just read (the last context token and each
        drafted one, accepted or not) with the top-k of the target's logits after it: one topk
        over the rows, one small copy to the CPU. A token read twice in one forward (two tree
        nodes) keeps its first, shallowest row: its context is the closest to the real one."""
        first: dict[int, int] = {}
        for row, token in enumerate(tokens):
            if 0 <= token < self.rows:
                first.setdefault(token, row)
        if not first:
            return
        width = min(self.top_k, logits.shape[-1])
        picked = logits[list(first.values())] if len(first) < len(tokens) else logits
        top = picked.topk(width, dim=-1).indices.to(device="cpu", dtype=torch.int32)
        ids = torch.tensor(list(first), dtype=torch.long)
        self.table[ids, :width] = top
        self.known[ids] = True
        self.columns = min(self.columns, width)

    # -- propose: walk the matrix -----------------------------------------------------------------

    def propose(self, ids: list[int], k: int, sampling=None, generator=None, min_confidence: float = 0.0,
                stop_tokens: frozenset[int] = frozenset()) -> Draft | TreeDraft:
        """A chain of up to k tokens, or a tree of at most min(depth, k) levels, after ids.
        sampling, generator and min_confidence play no part: the candidates are the target's own
        past ranking, whatever the run samples with."""
        if self.speculation == CHAIN:
            return Draft(self.greedy_chain(ids[-1], k, stop_tokens), None)
        return TreeDraft(self.draft_tree(ids[-1], min(self.depth, k), stop_tokens), None, forwards=0)

    def greedy_chain(self, last: int, k: int, stop_tokens) -> list[int]:
        """Follow each token's first recycled successor, M[t][0], until an unknown row or k tokens."""
        chain, token = [], last
        while len(chain) < k and 0 <= token < self.rows and bool(self.known[token]):
            token = int(self.table[token, 0])
            chain.append(token)
        return cut_after_stop(chain, stop_tokens)

    def draft_tree(self, last: int, depth: int, stop_tokens) -> Tree:
        """Breadth-first search over M from the last context token: level by level, each frontier
        node with a known row gets M[t][:b_d] as children until the budget is spent. Children of
        one node are distinct (a row of a topk); nothing hangs under an end-of-turn token."""
        tokens: list[int] = []
        parents: list[int] = []
        frontier = [(ROOT, last)]  # (node index, token)
        for level in range(depth):
            frontier = [(node, t) for node, t in frontier if 0 <= t < self.rows and t not in stop_tokens]
            if not frontier or len(tokens) >= self.budget:
                break
            rows = torch.tensor([t for _, t in frontier], dtype=torch.long)
            b = min(self.branching[level], self.columns)
            children, known = self.table[rows, :b].tolist(), self.known[rows].tolist()
            born = []
            for (node, _), row, ok in zip(frontier, children, known):
                for child in row[: self.budget - len(tokens)] if ok else ():
                    tokens.append(child)
                    parents.append(node)
                    born.append((len(tokens) - 1, child))
            frontier = born
        return Tree(tuple(tokens), tuple(parents))


def per_depth_branching(branching, depth: int, top_k: int) -> tuple[int, ...]:
    """The children per node at depths 1..depth: one number for all, or one per depth, each at
    most top_k (a node's children are a row of the matrix)."""
    name, knob = "tree_branching", KNOBS["tree_branching"]
    if isinstance(branching, int) and not isinstance(branching, bool):
        check_value(knob, branching)
        values = (branching,) * depth
    else:
        values = tuple(branching) if isinstance(branching, (tuple, list)) else ()
        if len(values) != depth:
            raise KnobError(name, f"{name} must be an integer or one integer per level (depth {depth}), "
                                  f"got {branching!r}")
        for i, value in enumerate(values):
            check_int(f"{name}[{i}]", value, low=knob.low, high=knob.high)
    if max(values) > top_k:
        raise KnobError(name, f"{name} must be at most top_k ({top_k}): a node's children are a row "
                              f"of the matrix, got {branching!r}")
    return values
