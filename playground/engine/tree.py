"""Token trees: several draft candidates per position, verified together, as pure tensor math.

A tree holds n draft nodes in topological order (a parent before its children). Node i carries a
token and the index of its parent; -1 is the root, which stands for the last context token. The
target reads every node once: node i attends to the context and to its own ancestors only (the
tree attention mask) and sits at position len(context) + depth(i) - 1, so each node sees exactly
the sequence its root path spells.

Rows of p and q follow one convention everywhere: row 0 is the distribution after the context
(over the root's children), row i + 1 the distribution after node i (over node i's children).

Sampled verification is SpecInfer's multi-step speculative sampling (Miao et al. 2024,
"SpecInfer", Algorithm 2 / Theorem 4.2): at a node, try its children in turn; child x is
accepted with probability min(1, p_i(x) / q(x)); after a rejection the target distribution
becomes p_{i+1} = norm(max(0, p_i - q)); when every child is rejected, the next token is drawn
from the last residual. It reproduces p exactly when the children were drawn i.i.d. from q
(duplicates allowed); children taken without replacement (top-b) need a different rule
(recursive speculative decoding, Jeon et al. 2024), so sampled trees draw children i.i.d.
Greedy trees may take the draft's top-b children: greedy keeps the longest root path that the
target's argmax agrees with, then adds the target's argmax after it.

Nothing here touches a model or reseeds: randomness comes only from the passed generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.engine import sampling
from playground.engine.events import ACCEPTED, REJECTED, UNTESTED

ROOT = -1  # parent index of the root's children: the last context token


@dataclass(frozen=True)
class Tree:
    """Draft nodes in topological order: tokens[i] hangs under node parents[i] (-1: the root)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        object.__setattr__(self, "parents", tuple(int(a) for a in self.parents))
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"parents must have one entry per token ({len(self.tokens)}), got {len(self.parents)}")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"parents[{i}] must be in [-1, {i - 1}] (a parent comes first), got {parent}")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> tuple[int, ...]:
        """Depth of each node: 1 for the root's children."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent == ROOT else out[parent] + 1)
        return tuple(out)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> list[int]:
        """Indices of node's children in the order they were drafted (node -1: the root)."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to node."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def ancestor_mask(tree: Tree) -> torch.Tensor:
    """allowed[i, j]: node i may attend to node j, i.e. j is i or one of its ancestors.  -> [n, n] bool"""
    n = len(tree)
    allowed = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(tree.parents):
        if parent != ROOT:
            allowed[i] |= allowed[parent]  # parents come first, so their row is complete
    return allowed


def tree_positions(tree: Tree, start: int) -> torch.Tensor:
    """Position id of each node: start + depth - 1, start = len(context).  -> [n] long"""
    return torch.tensor(tree.depths, dtype=torch.long) + (start - 1)


def attention_mask(tree: Tree, prefix: int, cached_prefix: int = 0) -> torch.Tensor:
    """The whole mask of one forward that reads `prefix - cached_prefix` new context tokens, then
    every tree node, over a cache already holding `cached_prefix` tokens.  -> [new, kv] bool

    Context tokens attend causally; nodes attend to the whole context and their ancestors.
    """
    fresh, n = prefix - cached_prefix, len(tree)
    allowed = torch.zeros(fresh + n, prefix + n, dtype=torch.bool)
    allowed[:fresh, :prefix] = torch.ones(fresh, prefix, dtype=torch.bool).tril(cached_prefix)
    allowed[fresh:, :prefix] = True
    allowed[fresh:, prefix:] = ancestor_mask(tree)
    return allowed


# -- verification ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeVerdict:
    """Outcome of verifying a tree: the accepted root path and what each node went through."""

    path: list[int]  # accepted node indices, root's child first
    next_token: int  # the target's own token after the path (resampled or bonus)
    next_from: torch.Tensor  # the distribution next_token came from (a residual or a p row)
    resampled: bool  # True when the path's last node had children and all were rejected
    accept_probs: list[float | None]  # per node: min(1, p_i(x)/q(x)) when tried (p_i: after earlier rejections)
    uniforms: list[float | None]  # per node: u drawn when tried (None when greedy or untested)
    fates: list[str]  # per node: ACCEPTED, REJECTED or UNTESTED


def greedy_tree_verify(tree: Tree, target_logits: torch.Tensor) -> TreeVerdict:
    """Longest root path whose every node is the target's argmax after its parent, then the
    target's argmax after the path.  target_logits: [n+1, V] (row 0 after the context)."""
    best = target_logits.argmax(-1).tolist()
    n = len(tree)
    probs, fates = [None] * n, [UNTESTED] * n
    path, node = [], ROOT
    while True:
        match = None
        for child in tree.children(node):
            probs[child] = float(tree.tokens[child] == best[node + 1])
            fates[child] = REJECTED
            if probs[child] and match is None:
                match = child
        if match is None:
            row = target_logits[node + 1]
            resampled = bool(tree.children(node))
            onehot = torch.nn.functional.one_hot(torch.tensor(best[node + 1]), row.shape[-1]).float()
            return TreeVerdict(path, best[node + 1], onehot, resampled, probs, [None] * n, fates)
        fates[match] = ACCEPTED
        path.append(match)
        node = match


def try_children(p: torch.Tensor, q: torch.Tensor | None, tokens: list[int], generator) -> tuple[int | None, torch.Tensor, list[float], list[float]]:
    """SpecInfer's multi-step speculative sampling at one node: try each child x in turn,
    accept with min(1, p_i(x)/q(x)), else move on with p_{i+1} = norm(max(0, p_i - q)).

    p, q: [V] target and draft distributions at the node; tokens: its children, drawn i.i.d. from q.
    q None: the children are deterministic candidates (n-gram, suffix or recycled tokens), each
    tried with its own one-hot q: accepted with p_i(x), else p_{i+1} is p_i with x removed. Each
    try is a rejection sampler of p_i whatever its proposal, so the chain of tries stays exact.
    Returns (index of the accepted child or None, the target distribution left, ratios, uniforms).
    """
    ratios, uniforms = [], []
    for i, x in enumerate(tokens):
        q_x = torch.nn.functional.one_hot(torch.tensor(x, device=p.device), p.shape[-1]).to(p.dtype) if q is None else q
        ratio = float(sampling.acceptance_probs(p[None], q_x[None], torch.tensor([x], device=p.device))[0])
        u = float(torch.rand(1, generator=generator, device=p.device))
        ratios.append(ratio)
        uniforms.append(u)
        if u < ratio:
            return i, p, ratios, uniforms
        p = sampling.residual_distribution(p, q_x)
    return None, p, ratios, uniforms


def sampled_tree_verify(tree: Tree, q: torch.Tensor | None, p: torch.Tensor, generator) -> TreeVerdict:
    """Walk down from the root with try_children until a node's children are all rejected (draw
    the next token from the residual left) or a leaf is reached (bonus token from its p row).

    q, p: [n+1, V] draft and target distributions (row 0 after the context, row i+1 after node i;
    q rows of leaves are never read); q None: deterministic candidates (see try_children).
    """
    n = len(tree)
    probs, us, fates = [None] * n, [None] * n, [UNTESTED] * n
    path, node = [], ROOT
    while True:
        children = tree.children(node)
        tokens = [tree.tokens[c] for c in children]
        if not children:
            row = p[node + 1]
            return TreeVerdict(path, sampling.sample(row, generator), row, False, probs, us, fates)
        chosen, left, ratios, uniforms = try_children(p[node + 1], None if q is None else q[node + 1], tokens, generator)
        for child, ratio, u in zip(children, ratios, uniforms):
            probs[child], us[child], fates[child] = ratio, u, REJECTED
        if chosen is None:
            return TreeVerdict(path, sampling.sample(left, generator), left, True, probs, us, fates)
        node = children[chosen]
        fates[node] = ACCEPTED
        path.append(node)


def candidate_rows(tree: Tree, vocab: int, device=None) -> torch.Tensor:
    """What a viewer is shown as q for a tree of deterministic candidates: 1 on each node's token
    in its parent's row (an indicator of what was proposed, not a distribution).  -> [n+1, V]
    Made where it is read (`device`), in one indexed write: no [n+1, V] copy from the host a step."""
    rows = torch.zeros(len(tree) + 1, vocab, device=device)
    parents = torch.tensor(tree.parents, dtype=torch.long, device=device) + 1
    rows[parents, torch.tensor(tree.tokens, dtype=torch.long, device=device)] = 1.0
    return rows


# -- expected length ---------------------------------------------------------------------------


def expected_tree_tokens(accept_by_rank, budget: int, depth: int, branching: int) -> float:
    """E[tokens per target call] of the best tree of `budget` nodes under Sequoia's positional
    acceptance model (Chen et al. 2024, "Sequoia", §3.1): the k-th child of an accepted node is
    the one accepted with probability accept_by_rank[k - 1], whatever else happened. A node lies
    on the accepted path with the product of those along its root path, so the expected number
    of accepted drafts is the sum over the nodes, and the target adds one token of its own.

    The tree is grown best-first (the node most likely to be reached next), within `depth` levels
    and `branching` children per node: with chances that shrink along paths and over ranks, the
    best tree of that size. A chain is accept_by_rank = (α,), branching 1: 1 + α + … + α^γ."""
    import heapq

    ranks = [float(a) for a in accept_by_rank][:branching]
    if not ranks or budget < 1:
        return 1.0
    total = 1.0
    frontier = [(-ranks[0], 1, 1, 1.0)]  # (-chance, depth, rank, parent's chance): the next child on offer
    for _ in range(budget):
        if not frontier:
            break
        negative, level, rank, parent = heapq.heappop(frontier)
        chance = -negative
        total += chance
        if rank < len(ranks):  # the same parent's next child
            heapq.heappush(frontier, (-parent * ranks[rank], level, rank + 1, parent))
        if level < depth:  # this node's first child
            heapq.heappush(frontier, (-chance * ranks[0], level + 1, 1, chance))
    return total
