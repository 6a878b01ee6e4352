"""A token tree's budget from the measured v(k), and whether a tree beats the chain of γ there.

A tree verifies all its nodes in one target forward: n nodes plus the token before them cost
v(n + 1) plain steps. Where that forward waits on reading the weights (a GPU at batch 1, bf16 on a
CPU with AMX) v stays near 1 and a wide tree is nearly free to check; where a kernel works on
blocks of rows (the int4 CPU kernel: flat to four rows, a jump at five) a 16-node tree costs
several plain steps and loses to the chain it was meant to beat. So the tree's default budget on a
device comes from its measured curve, and the page says when the curve predicts a loss.

Pure functions of measured numbers (no model, no clock, no UI); the events of a race are folded
into them by `from_events`.
"""

from __future__ import annotations

from dataclasses import dataclass

from playground.engine.sampling import expected_speedup, verify_cost

# A verification "cheap" enough for a tree: within a quarter of a plain step more than one step.
# A policy, not a measurement: every budget it picks is read off the measured curve.
CHEAP_V = 1.25


@dataclass(frozen=True)
class Chain:
    """The chain a tree is set against: γ drafts accepted at α, each draft step c plain steps."""

    alpha: float
    gamma: int
    c: float


@dataclass(frozen=True)
class TreeRun:
    """A tree as measured (or planned): per target call its draft nodes, draft forwards (one per
    level) and tokens kept; each level forward c_level plain steps; acceptance by child rank."""

    budget: int  # the most nodes the tree may grow (the knob)
    nodes: float  # draft nodes verified per call (mean)
    levels: float  # draft forwards per call (mean): the root's and one per expanded level
    c_level: float  # one level forward ÷ one plain target step
    tokens: float  # tokens emitted per target call (mean)
    depth: int = 1  # the depth knob: the most levels
    branching: int = 1  # children per expanded node
    ranks: tuple[float, ...] = ()  # P(the k-th child is the one kept | its parent was), k = 1, 2, ...


@dataclass(frozen=True)
class Forecast:
    """What the measured curve predicts for a tree against the chain, and the budget it suggests."""

    budget: int
    ratio: float  # the tree's predicted speed ÷ the chain's
    suggested: int  # the largest budget the target verifies cheaply (cheap_budget)
    suggested_ratio: float | None  # the same prediction at the suggested budget (None: not predicted)
    gamma: int
    threshold: float

    @property
    def loses(self) -> bool:
        return self.ratio < 1.0


def cheap_budget(v, cap: int, threshold: float = CHEAP_V) -> int:
    """The largest tree budget n ≤ cap whose verification v(n + 1) stays within `threshold` plain
    steps, over the measured range of v (v[0] = v(1)); 1 when even two rows cost more. Past the
    measured range nothing is vouched for, so a curve measured to k = K caps the budget at K - 1."""
    if cap < 1:
        raise ValueError(f"cap: a tree budget is at least 1 node, got {cap}")
    if len(v) < 2:
        raise ValueError(f"v: the curve needs v(1) and v(2) at least, got {len(v)} values")
    cheap = [n for n in range(1, min(cap, len(v) - 1) + 1) if v[n] <= threshold]
    return max(cheap, default=1)


def default_budget(v, default: int, threshold: float = CHEAP_V) -> tuple[int, str | None]:
    """The budget a tree left at its default runs with: the largest the target verifies cheaply on
    the measured curve (cheap_budget, never past the default), and the page's line saying so; the
    default and None when the curve verifies the default's tree cheaply too."""
    budget = cheap_budget(v, default, threshold)
    if budget >= default:
        return default, None
    dear = (f"{default} nodes would cost v({default + 1}) = {v[default]:.2f}" if default < len(v)
            else f"measured to k = {len(v)}")
    why = (f"the largest this target verifies within {threshold:g} plain steps on the measured v(k) "
           f"(v({budget + 1}) = {v[budget]:.2f}; {dear})" if v[budget] <= threshold else
           f"the smallest tree: even 2 rows cost more than {threshold:g} plain steps on the measured v(k) "
           f"(v(2) = {v[1]:.2f})")
    return budget, f"tree budget {budget}, not the default {default}: {why}; set another budget to override"


def tree_speedup(tokens: float, nodes: float, levels: float, c_level: float, v) -> float:
    """A tree's expected speedup over plain decoding: tokens per call over what a call costs in
    plain steps, `levels` draft forwards at c_level each and one verification over nodes + 1 rows."""
    return tokens / (levels * c_level + verify_cost(v, nodes + 1))


def chain_speedup(chain: Chain, v) -> float:
    return expected_speedup(chain.alpha, chain.gamma, chain.c, v)


def planned_tokens(tree: TreeRun, budget: int) -> float:
    """Tokens per call of the best tree of `budget` nodes under the measured acceptance by rank
    (Sequoia's positional model, engine/tree.expected_tree_tokens)."""
    from playground.engine.tree import expected_tree_tokens

    return expected_tree_tokens(tree.ranks, budget, tree.depth, tree.branching)


def forecast(v, chain: Chain, tree: TreeRun, threshold: float = CHEAP_V) -> Forecast:
    """The tree's speed over the chain's as the measured v(k) predicts it, and a budget to try.

    The tree is charged its measured tokens, levels and level cost, and v(nodes + 1) from the
    curve; the chain the formula with v(γ + 1). At the suggested budget the tokens come from the
    measured acceptance by rank, and the levels are at most the measured ones (a smaller tree is
    no deeper), each still charged c_level: an upper bound on its drafting."""
    if not 1 <= tree.nodes + 1 <= len(v) or chain.gamma + 1 > len(v):
        raise ValueError(f"v: measured for k = 1..{len(v)}, but the tree verifies {tree.nodes + 1:g} rows "
                         f"and the chain {chain.gamma + 1}")
    chain_rate = chain_speedup(chain, v)
    ratio = tree_speedup(tree.tokens, tree.nodes, tree.levels, tree.c_level, v) / chain_rate
    suggested = cheap_budget(v, tree.budget, threshold)
    suggested_ratio = None
    if suggested < tree.budget and tree.ranks:
        levels = min(tree.levels, suggested, tree.depth)
        rate = tree_speedup(planned_tokens(tree, suggested), suggested, levels, tree.c_level, v)
        suggested_ratio = rate / chain_rate
    return Forecast(tree.budget, ratio, suggested, suggested_ratio, chain.gamma, threshold)


def warning(f: Forecast) -> str | None:
    """The page's line when the measured curve predicts that the tree loses to the chain; None
    when it does not."""
    if not f.loses:
        return None
    head = f"the measured v(k) predicts this tree (budget {f.budget}) runs at {f.ratio:.2f}× the chain (γ {f.gamma})"
    if f.suggested >= f.budget:
        return f"{head}: the chain is the faster choice on this device"
    if f.suggested_ratio is None:
        return f"{head}: try budget {f.suggested} (verified within {f.threshold:g} plain steps)"
    better = f"predicted {f.suggested_ratio:.2f}× the chain"
    tail = "" if f.suggested_ratio >= 1 else ", or the chain"
    return f"{head}: try budget {f.suggested} ({better}{tail})"


# -- from a race's events ----------------------------------------------------------------------


def from_events(events, baseline, budget: int, depth: int, branching: int) -> TreeRun | None:
    """The tree as a race measured it so far: its decoding calls (not the prompt's), the plain step
    from the autoregressive baseline beside it. None until both have decoded."""
    from playground.engine.events import Costs, Tally, acceptance_by_rank, costs, steady_events, tree_costs

    steady = [e for e in steady_events(events) if e.tree is not None and not e.prompt_tokens]
    spent = Tally(cost=tree_costs(events), plain=costs(baseline) if baseline else Costs())
    if not steady or not spent.plain_step_s or not spent.cost.drafted:
        return None
    hits, trials = acceptance_by_rank(events)
    calls = len(steady)
    return TreeRun(
        budget=budget,
        nodes=sum(len(e.tree.nodes) for e in steady) / calls,
        levels=sum(e.tree.draft_forwards for e in steady) / calls,
        c_level=spent.c,
        tokens=sum(len(e.emitted) for e in steady) / calls,
        depth=depth,
        branching=branching,
        ranks=tuple(h / t for h, t in zip(hits, trials) if t),
    )


def race_warning(events, baseline, v, settings, chain_c: float | None = None) -> str | None:
    """The warning line for a tree race, or None (no tree, too few calls, a curve too short, or a
    tree the curve does not predict to lose). The chain's α is the tree's first-rank acceptance
    (the chain's own guess is a tree's first child); its c the measured one-row draft step when
    known, else the tree's level cost (no less than a one-row step: it can only flatter the tree,
    so a loss predicted with it stands)."""
    tree = from_events(events, baseline, settings.tree_budget, settings.tree_depth, settings.tree_branching)
    if v is None or tree is None or not tree.ranks or tree.nodes + 1 > len(v) or settings.gamma + 1 > len(v):
        return None
    c = chain_c if chain_c is not None else tree.c_level
    return warning(forecast(v, Chain(tree.ranks[0], settings.gamma, c), tree))
