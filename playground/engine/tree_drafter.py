"""A draft model that proposes a token tree instead of a chain: one batched draft forward per depth.

Shape, under a node budget: every expanded node gets `branching` children; at each depth the
nodes with the highest cumulative draft probability are expanded first, as many as the budget
still has room for, or at most `width` of them (EAGLE-2's dynamic expansion, Li et al. 2024). Greedy trees take the draft's top-b distinct tokens; sampled trees
draw b children i.i.d. from q (duplicates allowed), which is what SpecInfer's verification needs
to be lossless (see tree.py). One draft forward reads all nodes of a depth at once, each
attending to the context and its own ancestors, so the draft's cost counts per depth, not per node.
"""

from __future__ import annotations

import math

import torch

from playground.config import KNOBS, TREE, check_value
from playground.engine.drafters import TreeDraft, drafted_width, readable
from playground.engine.kvcache import CachedModel
from playground.engine.runners.choice import DRAFT
from playground.engine.memory import cached_model_bytes
from playground.engine.sampling import Sampling, display_probs
from playground.engine.tree import ROOT, Tree, ancestor_mask


class TreeDrafter:
    """Drafts a token tree with a small causal LM and its own KV cache (rolled back to the
    context after each proposal, so only accepted tokens are ever re-read)."""

    name = "draft tree"
    speculation = TREE

    def __init__(self, model, budget: int = KNOBS["tree_budget"].default,
                 depth: int = KNOBS["tree_depth"].default, branching: int = KNOBS["tree_branching"].default,
                 vocab_size: int | None = None, draft_vocab: int | None = None,
                 width: int = KNOBS["tree_width"].default, runner: str = "auto"):
        """width: most nodes expanded per depth, the best by cumulative draft probability (EAGLE-2's
        top-k expansion: the tree grows deep where the draft is confident); 0 expands as many as
        the budget has room for (a full b-ary tree until the budget runs out)."""
        for name, value in (("budget", budget), ("depth", depth), ("branching", branching), ("width", width)):
            check_value(KNOBS[f"tree_{name}"], value)  # the run configuration's names and ranges
        self.budget, self.depth, self.branching, self.width = budget, depth, branching, width
        self.lm = CachedModel(model, head_rows=draft_vocab, runner=runner, tree=True, role=DRAFT)
        self.vocab_size = drafted_width(self.lm.head_rows or self.lm.vocab_size, vocab_size)  # as ModelDrafter's
        self.device = self.lm.device

    def begin(self, ids: list[int]) -> None:
        self.lm.reset()

    def resident_bytes(self) -> int:
        return cached_model_bytes(self.lm)

    def propose(self, ids: list[int], max_depth: int, sampling: Sampling, generator, min_confidence: float = 0.0,
                stop_tokens: frozenset[int] = frozenset()) -> TreeDraft:
        """Grow a tree of at most `budget` nodes and min(depth, max_depth) levels after ids.
        min_confidence is a chain's cut; a tree ranks its nodes by cumulative probability instead."""
        depth, ids = min(self.depth, max_depth), readable(ids, self.lm.vocab_size)
        q_root = display_probs(self.lm.logits_for(ids, keep=1)[-1, : self.vocab_size], sampling)
        tokens, parents, scores, rows = [], [], [], {ROOT: q_root}
        frontier, fed, forwards = [ROOT], [], 1
        for level in range(1, depth + 1):
            born = self.grow(frontier, rows, scores, tokens, parents, sampling, generator)
            if level == depth or len(tokens) >= self.budget:
                break
            frontier = self.worth_expanding(born, tokens, parents, scores, stop_tokens, sampling)
            if not frontier:
                break
            self.expand(ids, frontier, fed, tokens, parents, rows, sampling)
            fed += frontier
            forwards += 1
        self.lm.rollback(len(ids))  # drop the tree: the next proposal re-reads only what was accepted
        q = q_root.new_zeros(len(tokens) + 1, q_root.shape[-1])
        for node, row in rows.items():
            q[node + 1] = row
        return TreeDraft(Tree(tuple(tokens), tuple(parents)), q, forwards)

    def grow(self, frontier, rows, scores, tokens, parents, sampling, generator) -> list[int]:
        """Give each frontier node its children, best first, while the budget lasts."""
        born = []
        for node in frontier:
            room = self.budget - len(tokens)
            if room <= 0:
                break
            base = scores[node] if node != ROOT else 0.0
            for x in children_of(rows[node], min(self.branching, room), sampling, generator):
                tokens.append(x)
                parents.append(node)
                scores.append(base + math.log(max(float(rows[node][x]), 1e-30)))
                born.append(len(tokens) - 1)
        return born

    def worth_expanding(self, born, tokens, parents, scores, stop_tokens, sampling) -> list[int]:
        """The new nodes that will get children, highest cumulative draft probability first: as
        many as the budget has room for. Never an end-of-turn token (nothing follows it), nor a
        repeated sibling of a sampled tree (once its twin is rejected it is rejected for sure)."""
        seen, keep = set(), []
        for node in born:
            key = (parents[node], tokens[node])
            if tokens[node] in stop_tokens or (key in seen and not sampling.greedy):
                continue
            seen.add(key)
            keep.append(node)
        keep.sort(key=lambda node: -scores[node])
        room = math.ceil((self.budget - len(tokens)) / self.branching)
        return keep[: min(room, self.width) if self.width else room]

    def expand(self, ids, frontier, fed, tokens, parents, rows, sampling) -> None:
        """One draft forward over the frontier nodes: q after each of them.

        The cache holds ids, then the nodes fed at earlier depths (in `fed` order); each new node
        sees the context, the cached ancestors and itself."""
        order = fed + frontier
        full = ancestor_mask(Tree(tuple(tokens), tuple(parents)))
        allowed = torch.ones(len(frontier), len(ids) + len(order), dtype=torch.bool)
        allowed[:, len(ids):] = full[frontier][:, order]
        depths = Tree(tuple(tokens), tuple(parents)).depths
        positions = torch.tensor([len(ids) + depths[node] - 1 for node in frontier])
        logits = self.lm.feed_masked([tokens[node] for node in frontier], positions, allowed, len(frontier))
        for node, row in zip(frontier, logits[:, : self.vocab_size]):
            rows[node] = display_probs(row, sampling)


def children_of(q: torch.Tensor, b: int, sampling: Sampling, generator) -> list[int]:
    """Greedy: the draft's top-b distinct tokens. Sampled: b tokens i.i.d. from q."""
    if sampling.greedy:
        return q.topk(min(b, q.shape[-1])).indices.tolist()
    return torch.multinomial(q, b, replacement=True, generator=generator).tolist()
