"""Suffix decoding: draft what followed the longest matching suffix, with no model at all.

SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975) keeps a suffix tree over the prompt, the text
generated so far and earlier outputs, with a count on every node (how often that substring
occurred). Each step it finds the longest suffix of the context in the tree (pattern matching),
and speculates the continuations that followed it, weighted by their counts: the estimated
probability of a draft token is the product of count ratios along its path, candidates under
`min_prob` are cut, and the number of tokens speculated grows with the match length,
MAX_SPEC = α · match length (a long match is good evidence that the text repeats).

Snowflake's Arctic Inference ships a C++ suffix tree (`pip install arctic-inference`); on this
project's CPU-only machine its 0.3.0 sdist builds and runs (it needs numpy at import). It is not
used here: it would be a compiled dependency for a few thousand tokens of text, and its global
tree holds responses only, while this drafter indexes prompts too. What is below is a pure
Python version of its design: a suffix tree limited to `reach` tokens of depth, edges compressed
(a path with no branching is one node holding a list of tokens, all with the same count), grown
one token at a time through the nodes where the current sequence's suffixes end ("active" nodes),
so appending a token costs O(reach), never a rebuild.

The drafter's q is one-hot (None): chain drafts are one path, tree drafts hold distinct children
per node, which sampled verification tries each with its own one-hot q (exact, see tree.py).
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections import deque

from playground.config import CHAIN, KNOBS, MAX_GAMMA, TREE, check_int, check_number, check_value
from playground.engine.drafters import Draft, TreeDraft, cut_after_stop
from playground.engine.sampling import Sampling
from playground.engine.tree import ROOT, Tree


class Node:
    """A compressed edge of the suffix tree: `edge` tokens that always occur together, `count`
    times (the count of every substring ending on this edge), and the nodes branching after it.

    `owner` and `end`: a leaf with count 1 that the current sequence is still writing (its edge
    is the sequence's tokens up to `end`) grows by appending to its edge instead of by a new node,
    which is what keeps the tree to about two nodes a token."""

    __slots__ = ("edge", "count", "children", "stamp", "owner", "end")

    def __init__(self, edge: list[int], count: int, stamp: int, owner: int | None = None, end: int = 0):
        self.edge, self.count, self.stamp, self.owner, self.end = edge, count, stamp, owner, end
        self.children: dict[int, Node] = {}


class SuffixIndex:
    """Every substring of up to `reach` tokens of the indexed sequences, with its count.

    One sequence at a time is open (the current run: prompt, then the tokens generated); earlier
    ones stay until forgotten. Node counts are occurrences; `stamp` is when a node was last
    counted, so of two equally frequent continuations the more recent one is preferred."""

    def __init__(self, reach: int):
        self.reach = reach
        self.root = Node([], 0, 0)
        self.sequences: dict[int, list[int]] = {}
        self.current: int | None = None
        self.active: list[Node] = []  # where the current sequence's suffixes end, longest first
        self.ids = itertools.count()
        self.clock = 0

    def open(self, tokens=()) -> int:
        """Start a new current sequence (the previous one stays indexed) and index `tokens`."""
        self.current = next(self.ids)
        self.sequences[self.current] = []
        self.active = []
        self.extend(tokens)
        return self.current

    @property
    def tokens(self) -> list[int]:
        """The current sequence (empty when none is open)."""
        return self.sequences.get(self.current, [])

    def extend(self, tokens) -> None:
        for token in tokens:
            self.append(int(token))

    def append(self, token: int) -> None:
        """Index every substring the new token ends: each active suffix grows by one token (the
        longest one, at `reach`, is dropped), and the new one-token suffix starts at the root."""
        sequence = self.sequences[self.current]
        n = len(sequence)
        sequence.append(token)
        self.clock += 1
        suffixes = self.active[1:] if len(self.active) == self.reach else self.active
        self.active = [self.grow(node, token, n) for node in [*suffixes, self.root]]

    def grow(self, node: Node, token: int, n: int) -> Node:
        """The node where (node's path + token) ends, counted once more; `n` is the token's index."""
        if node is not self.root and not node.children and node.count == 1 and node.owner == self.current \
                and node.end == n:
            node.edge.append(token)  # our own leaf: its one occurrence is the one growing
            node.end += 1
            node.stamp = self.clock
            return node
        child = node.children.get(token)
        if child is None:
            child = node.children[token] = Node([token], 1, self.clock, self.current, n + 1)
            return child
        if len(child.edge) > 1:
            child = split(node, child, 1)  # only the first token's substring is counted again
        child.count += 1
        child.stamp = self.clock
        return child

    def forget(self, sequence_id: int) -> None:
        """Uncount every substring a sequence added; nodes left with count 0 are dropped."""
        sequence = self.sequences.pop(sequence_id)
        if sequence_id == self.current:
            self.current, self.active = None, []
        for start in range(len(sequence)):
            self.uncount(sequence[start: start + self.reach])

    def uncount(self, path: list[int]) -> None:
        """One occurrence of `path` (and so of each of its prefixes) fewer."""
        node, i = self.root, 0
        while i < len(path):
            child = node.children[path[i]]
            if i + len(child.edge) > len(path):
                child = split(node, child, len(path) - i)  # the rest of the edge keeps its count
            child.count -= 1
            if child.count == 0:
                del node.children[path[i]]  # everything below counted this occurrence too
                return
            i += len(child.edge)
            node = child

    def restart(self, tokens) -> None:
        """The current sequence becomes `tokens`: forgotten and indexed again (for a context that
        is not a continuation of what was indexed, which the engine never hands a drafter)."""
        if self.current is not None:
            self.forget(self.current)
        self.open(tokens)

    def longest_match(self, max_match: int) -> tuple[int, Node | None]:
        """Pattern matching: the longest suffix of the current sequence, at most max_match tokens,
        that occurred before with something after it. -> (its length, its node) or (0, None)"""
        for i, node in enumerate(self.active):
            length = len(self.active) - i
            if length <= max_match and node.children:
                return length, node
        return 0, None

    def count(self, path) -> int:
        """How often `path` occurs in the indexed sequences (0 for an empty or unseen path)."""
        node, i, path = self.root, 0, list(path)
        while path and i < len(path):
            node = node.children.get(path[i])
            if node is None or node.edge[: len(path) - i] != path[i: i + len(node.edge)]:
                return 0
            i += len(node.edge)
        return node.count if path else 0


def split(parent: Node, child: Node, at: int) -> Node:
    """Cut child's edge after `at` tokens: a new upper node holds them; child keeps the rest (and
    its identity, so an active suffix ending at child still ends there)."""
    upper = Node(child.edge[:at], child.count, child.stamp)
    child.edge = child.edge[at:]
    upper.children[child.edge[0]] = child
    parent.children[upper.edge[0]] = upper
    return upper


def ranked(node: Node) -> tuple[list[Node], int]:
    """A node's continuations, most frequent first (the latest on a tie), and their total count:
    the occurrences that went on, so a count ratio is P(next token | the text went on)."""
    children = sorted(node.children.values(), key=lambda c: (c.count, c.stamp), reverse=True)
    return children, sum(c.count for c in children)


def speculate_path(match: Node, max_spec: int, min_prob: float, stop_tokens) -> list[int]:
    """A chain: the most frequent continuation, token by token, while its estimated probability
    (the product of count ratios along it) stays at least min_prob."""
    tokens, prob, node, at = [], 1.0, match, len(match.edge)
    while len(tokens) < max_spec:
        if at == len(node.edge):
            if not node.children:
                break
            children, total = ranked(node)
            prob *= children[0].count / total
            if prob < min_prob:
                break
            node, at = children[0], 0
        tokens.append(node.edge[at])
        at += 1
    return cut_after_stop(tokens, stop_tokens)


def speculate_tree(match: Node, max_spec: int, levels: int, min_prob: float, stop_tokens) -> Tree:
    """A speculation tree: the most probable continuations by count, best first, at most
    max_spec nodes and `levels` deep; each node's children are distinct tokens (one trie child
    each). Nothing grows after an end-of-turn token."""
    tokens, parents, order = [], [], itertools.count()
    frontier: list = []  # (-estimated probability, tie order, node, offset in its edge, parent, level)

    def offer(node: Node, prob: float, parent: int, level: int) -> None:
        children, total = ranked(node)
        for child in children:
            estimate = prob * child.count / total
            if estimate >= min_prob:
                heapq.heappush(frontier, (-estimate, next(order), child, 0, parent, level + 1))

    offer(match, 1.0, ROOT, 0)
    while frontier and len(tokens) < max_spec:
        negative, _, node, at, parent, level = heapq.heappop(frontier)
        tokens.append(node.edge[at])
        parents.append(parent)
        if tokens[-1] in stop_tokens or level >= levels:
            continue
        if at + 1 < len(node.edge):  # inside an edge the text never branched: ratio 1
            heapq.heappush(frontier, (negative, next(order), node, at + 1, len(tokens) - 1, level + 1))
        else:
            offer(node, -negative, len(tokens) - 1, level)
    return Tree(tuple(tokens), tuple(parents))


class SuffixDrafter:
    """Suffix decoding as a Drafter: chains (the single most frequent path) or trees (the most
    probable continuations, several distinct children per node), q one-hot.

    The object outlives a run: begin() opens a new sequence for the prompt but keeps what earlier
    runs indexed, up to `history` earlier sequences (each a prompt and what was generated after
    it; the oldest is forgotten first)."""

    name = "suffix decoding"
    vocab_size = None
    device = None  # deterministic: no generator

    def __init__(self, speculation: str = CHAIN, budget: int = KNOBS["tree_budget"].default,
                 depth: int = KNOBS["tree_depth"].default, max_match: int = 32, max_spec: int = 16,
                 spec_factor: float = 1.0, min_prob: float = 0.1, history: int = 16):
        """budget, depth: a tree's most nodes and levels (a chain's length is the engine's γ);
        max_match: the longest suffix matched; max_spec: the most tokens speculated past it;
        spec_factor: α in MAX_SPEC = α · match length; min_prob: the lowest estimated
        probability a draft token may have; history: earlier sequences kept indexed."""
        check_value(KNOBS["speculation"], speculation)
        check_value(KNOBS["tree_budget"], budget)  # the run configuration's names and ranges
        check_value(KNOBS["tree_depth"], depth)
        check_int("max_match", max_match, low=1, high=256)
        check_int("max_spec", max_spec, low=1, high=MAX_GAMMA)
        check_number("spec_factor", spec_factor, low=0.0, high=float(MAX_GAMMA), low_open=True)
        check_number("min_prob", min_prob, low=0.0, high=1.0)
        check_int("history", history, low=0, high=4096)
        self.speculation, self.budget, self.depth = speculation, budget, depth
        self.max_match, self.max_spec, self.spec_factor = max_match, max_spec, spec_factor
        self.min_prob, self.history = min_prob, history
        self.index = SuffixIndex(reach=max_match + max_spec)
        self.earlier: deque[int] = deque()  # ids of the earlier sequences still indexed, oldest first
        self.matched = 0  # the last proposal's match length

    def begin(self, ids: list[int]) -> None:
        """A new prompt: the sequence so far joins the earlier ones (the oldest beyond `history`
        are forgotten), and the prompt is indexed as the start of a new one."""
        if self.index.current is not None:
            self.earlier.append(self.index.current)
        while len(self.earlier) > self.history:
            self.index.forget(self.earlier.popleft())
        self.index.open(ids)

    def propose(self, ids: list[int], k: int, sampling: Sampling, generator, min_confidence: float = 0.0,
                stop_tokens: frozenset[int] = frozenset()) -> Draft | TreeDraft:
        """Index what was generated since the last call, match the longest suffix, speculate
        MAX_SPEC = α · match length tokens after it (a chain of at most k, a tree of at most k
        levels). min_confidence is a model's cut; this drafter cuts on min_prob, its own estimate."""
        self.catch_up(ids)
        length, match = self.index.longest_match(self.max_match)
        self.matched = length  # what the proposal rests on: the hybrid learns α per match length
        max_spec = min(self.max_spec, int(self.spec_factor * length + 1e-9))
        if self.speculation == TREE:
            if match is None or max_spec < 1:
                return TreeDraft(Tree((), ()), None, forwards=0)
            levels = min(self.depth, k)
            tree = speculate_tree(match, min(max_spec, self.budget), levels, self.min_prob, stop_tokens)
            return TreeDraft(tree, None, forwards=0)
        if match is None:
            return Draft([], None)
        return Draft(speculate_path(match, min(max_spec, k), self.min_prob, stop_tokens), None)

    def resident_bytes(self) -> int:
        """The index's Python objects (nodes, their edges and child tables, the sequences kept),
        counted with sys.getsizeof: what the table costs beside a draft model's weights."""
        total, stack = 0, [self.index.root]
        while stack:
            node = stack.pop()
            total += sys.getsizeof(node) + sys.getsizeof(node.edge) + sys.getsizeof(node.children)
            stack.extend(node.children.values())
        return total + sum(sys.getsizeof(tokens) for tokens in self.index.sequences.values())

    def catch_up(self, ids: list[int]) -> None:
        """Index the tokens added to the context since the last call. The engine's context only
        grows (rejected drafts never enter it); any other context is indexed again from scratch."""
        indexed = self.index.tokens
        if self.index.current is not None and len(ids) >= len(indexed) and ids[: len(indexed)] == indexed:
            self.index.extend(ids[len(indexed):])
        else:
            self.index.restart(ids)
