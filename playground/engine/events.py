"""What the engine returns: one StepEvent per target call, and metrics as folds over them.

Events are plain data, so whatever draws or reports a run reads the same record; nothing here
computes on a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.engine.sampling import expected_speedup, verify_cost

# Fates of a token, as the UI colours them; a tree node may also be UNTESTED (never reached).
ACCEPTED, REJECTED, RESAMPLED, BONUS, TARGET = "accepted", "rejected", "resampled", "bonus", "target"
UNTESTED = "untested"


@dataclass(frozen=True)
class DraftToken:
    """One drafted position and how verification treated it."""

    token: int
    q: float  # q(x): draft probability of the token (softmax when greedy)
    p: float  # p(x): target probability of the token (softmax when greedy)
    accept_prob: float  # min(1, p/q); greedy: 1 if x is the target's argmax else 0
    uniform: float | None  # u drawn for this position; None when greedy or never tested
    fate: str  # ACCEPTED, or REJECTED (the first rejection and every token after it)
    top_q: tuple[tuple[int, float], ...] = ()  # most likely draft tokens, when detail is asked
    top_p: tuple[tuple[int, float], ...] = ()  # most likely target tokens, when detail is asked


@dataclass(frozen=True)
class TreeNode:
    """One node of a draft tree and how verification treated it."""

    token: int
    parent: int  # index of the parent node; -1 is the root (the last context token)
    depth: int  # 1 for the root's children
    q: float  # q(x) after the parent (softmax when greedy)
    p: float  # p(x) after the parent (softmax when greedy)
    ratio: float  # min(1, p/q) against the target's own p; greedy: 1 if x is the target's argmax else 0
    accept_prob: float | None  # the probability it was tried with (p after earlier siblings' rejections)
    uniform: float | None  # u drawn when tried; None when greedy or never tried
    fate: str  # ACCEPTED, REJECTED (tried and refused) or UNTESTED (never reached)


@dataclass(frozen=True)
class TreeRecord:
    """The tree a step drafted and verified in one target call."""

    nodes: tuple[TreeNode, ...]
    path: tuple[int, ...]  # accepted node indices, root's child first
    draft_forwards: int  # one per depth: the draft's cost counts per depth, not per node


@dataclass(frozen=True)
class StepEvent:
    """Everything one target call did: what was drafted, what survived, what it cost."""

    index: int  # 0 for the first target call
    gamma: int  # lookahead asked for this step (drafts may be fewer: budget, confidence cut)
    drafts: tuple[DraftToken, ...]
    n_accepted: int
    next_token: int  # the token the target added itself
    next_fate: str  # RESAMPLED after a rejection, BONUS after a full acceptance, TARGET if no draft
    next_p: float  # probability of next_token under the distribution it was drawn from
    emitted: tuple[int, ...]  # tokens appended to the output (cut at EOS, stop string or budget)
    prompt_tokens: int  # prompt tokens this call also read: the whole prompt on the first, else 0
    draft_s: float  # seconds the drafter spent proposing
    verify_s: float  # seconds of the target forward
    overhead_s: float  # the rest of the step: sampling math, cache rollback, bookkeeping
    finish: str | None = None  # "eos", "stop" or "length" on the last event
    residual_top: tuple[tuple[int, float], ...] = ()  # top of norm(max(0, p - q)) on rejection
    next_top: tuple[tuple[int, float], ...] = ()  # top of the distribution next_token came from
    tree: TreeRecord | None = None  # tree steps only; then drafts is one root path: the accepted
    # nodes and the deepest continuation below them, so folds over drafts count per depth
    source: str = ""  # a drafter of several sources (the hybrid): which drafted this step, and why
    why: str = ""

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def n_tested(self) -> int:
        """Draft positions the target tested: the accepted ones and the first rejection, if any
        (the ones after it were never tested). Summed over a run, alpha's denominator."""
        return self.n_accepted + (self.n_accepted < len(self.drafts))


@dataclass(frozen=True)
class RunMetrics:
    """Folds over one run's events."""

    new_tokens: int
    target_calls: int
    drafted: int
    accepted: int
    acceptance_rate: float  # accepted / drafted
    alpha: float  # per-position acceptance, accepted / tested: the estimate the formula wants
    mean_tokens_per_call: float  # Spec-Bench's "mean accepted tokens"
    mean_gamma: float  # drafted tokens per target call
    per_position: list[float] = field(default_factory=list)  # acceptance at draft position i
    seconds: float = 0.0  # wall time, the prompt's processing included
    tok_s: float = 0.0
    draft_forward_s: float = 0.0  # seconds per drafted token
    target_call_s: float = 0.0  # seconds per target call (verification forward)
    target_step_s: float = 0.0  # seconds of one plain target step: the baseline's, else target_call_s
    c: float = 0.0  # draft_forward_s / target_step_s: docs/design.md's cost ratio
    verify_cost: float | None = None  # target_call_s / the baseline's step (the formula assumes 1)
    predicted_speedup: float = 1.0  # docs/design.md's formula at (alpha, mean_gamma, c, v(mean_gamma + 1))
    predicted_v: float = 1.0  # the v(gamma + 1) that prediction used: the curve's, the measured one, or 1
    paper_speedup: float = 1.0  # the paper's formula (v = 1), to set beside the generalised one


def summarize(events: list[StepEvent], baseline: list[StepEvent] | None = None, v=None) -> RunMetrics:
    """Fold a run's events into its metrics.

    c is one draft forward over one plain target forward. With the autoregressive `baseline` of
    the same prompt, its steps give the plain forward's cost; without, the verification call
    stands in for it (the formula's own assumption that verifying costs one forward). Per-forward
    costs leave out the first call of each run, which also reads the prompt.

    The prediction charges verification v(gamma + 1) plain steps: from `v`, a measured curve
    v(1), v(2), ... (measure.verify_cost), when given and long enough; else the run's own verify
    cost when the baseline gives it; else 1, the paper's assumption.
    """
    new_tokens = sum(len(e.emitted) for e in events)
    calls = len(events)
    drafted = sum(len(e.drafts) for e in events)
    seconds = sum(e.seconds for e in events)
    t = tally(events, baseline)
    mean_gamma = drafted / calls if calls else 0.0
    # A tree's call verifies all its nodes, not one path: v is read at nodes + 1. (Its drafts are
    # one root path per call, so α and c count per level: the chain formula over levels.)
    nodes = sum(len(e.tree.nodes) if e.tree is not None else len(e.drafts) for e in events)
    verified = nodes / calls if calls else 0.0
    used_v = predicted_verify_cost(v, verified, t.verify_cost)
    return RunMetrics(
        new_tokens=new_tokens,
        target_calls=calls,
        drafted=drafted,
        accepted=t.accepted,
        acceptance_rate=t.accepted / drafted if drafted else 0.0,
        alpha=t.alpha,
        mean_tokens_per_call=new_tokens / calls if calls else 0.0,
        mean_gamma=mean_gamma,
        per_position=acceptance_by_position(events),
        seconds=seconds,
        tok_s=new_tokens / seconds if seconds else 0.0,
        draft_forward_s=t.draft_forward_s,
        target_call_s=t.target_call_s,
        target_step_s=t.target_step_s,
        c=t.c,
        verify_cost=t.verify_cost,
        predicted_speedup=expected_speedup(t.alpha, mean_gamma, t.c, used_v) if drafted else 1.0,
        predicted_v=used_v,
        paper_speedup=expected_speedup(t.alpha, mean_gamma, t.c) if drafted else 1.0,
    )


def predicted_verify_cost(v, verified: float, measured: float | None) -> float:
    """v(drafts verified + 1) for the prediction: the curve where it reaches, else the run's own,
    else 1."""
    if v is not None and verified + 1 <= len(v):
        return verify_cost(v, verified + 1)
    return measured if measured else 1.0


def steady_events(events: list[StepEvent]) -> list[StepEvent]:
    """The calls that decode only: all but the first, which also reads the prompt (kept when it
    is the only one, so a one-call run still has a cost)."""
    return [e for e in events if not e.prompt_tokens] or list(events)


@dataclass(frozen=True)
class Costs:
    """Raw sums behind the per-forward costs, over the calls that decode only (steady_events), so
    runs and prompts pool exactly: cost per drafted token = draft_s / drafted, and so on."""

    drafted: int = 0  # tokens drafted (a tree's: draft forwards, one per depth)
    draft_s: float = 0.0
    calls: int = 0  # target forwards
    verify_s: float = 0.0

    def __add__(self, other: Costs) -> Costs:
        return Costs(self.drafted + other.drafted, self.draft_s + other.draft_s, self.calls + other.calls,
                     self.verify_s + other.verify_s)


def costs(events: list[StepEvent]) -> Costs:
    steady = steady_events(events)
    return Costs(sum(len(e.drafts) for e in steady), sum(e.draft_s for e in steady), len(steady),
                 sum(e.verify_s for e in steady))


def tree_costs(events: list[StepEvent]) -> Costs:
    """A tree run's costs over its decoding calls, drafts counted per depth: one draft forward
    reads a whole level of the tree, so c for a tree is per depth."""
    steady = [e for e in steady_events(events) if e.tree is not None]
    return Costs(sum(e.tree.draft_forwards for e in steady), sum(e.draft_s for e in steady), len(steady),
                 sum(e.verify_s for e in steady))


@dataclass(frozen=True)
class Tally:
    """The raw sums behind α, c and v. Runs, prompts and measured points pool by adding tallies
    (Σ accepted / Σ tested, never a mean of ratios), so every tested draft weighs alike.

    c is docs/design.md's: one draft forward over one plain target forward (the baseline's step;
    without a baseline, the verification call stands in for it). v is one verification call
    over one plain step, known only with a baseline."""

    accepted: int = 0
    tested: int = 0  # draft positions tested: the accepted ones and each first rejection
    cost: Costs = Costs()  # the speculative run's decoding calls
    plain: Costs = Costs()  # the autoregressive baseline's decoding calls (calls, verify_s); empty without one

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.accepted + other.accepted, self.tested + other.tested, self.cost + other.cost,
                     self.plain + other.plain)

    @property
    def alpha(self) -> float:
        return self.accepted / self.tested if self.tested else 0.0

    @property
    def draft_forward_s(self) -> float:
        return self.cost.draft_s / self.cost.drafted if self.cost.drafted else 0.0

    @property
    def target_call_s(self) -> float:
        return self.cost.verify_s / self.cost.calls if self.cost.calls else 0.0

    @property
    def plain_step_s(self) -> float:
        return self.plain.verify_s / self.plain.calls if self.plain.calls else 0.0

    @property
    def target_step_s(self) -> float:
        """One plain target step: the baseline's, else the verification call."""
        return self.plain_step_s or self.target_call_s

    @property
    def c(self) -> float:
        return self.draft_forward_s / self.target_step_s if self.target_step_s else 0.0

    @property
    def verify_cost(self) -> float | None:
        return self.target_call_s / self.plain_step_s if self.plain_step_s else None


def tally(events: list[StepEvent], baseline: list[StepEvent] | None = None) -> Tally:
    """A run's tally, with the plain step from its autoregressive baseline when given."""
    return Tally(sum(e.n_accepted for e in events), sum(e.n_tested for e in events), costs(events),
                 costs(baseline) if baseline else Costs())


def pooled(tallies) -> Tally:
    """α, c and v over many tallies: the raw counts and seconds summed, then divided."""
    return sum(tallies, Tally())


def position_counts(events: list[StepEvent]) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per draft position i = 0, 1, ...: the raw sums a report pools."""
    drafted, accepted = [], []
    for e in events:
        for i, d in enumerate(e.drafts):
            if i == len(drafted):
                drafted.append(0)
                accepted.append(0)
            drafted[i] += 1
            accepted[i] += d.fate == ACCEPTED
    return drafted, accepted


def acceptance_by_position(events: list[StepEvent]) -> list[float]:
    """P(draft position i accepted | position i was drafted), for i = 0, 1, ..."""
    return by_position(*position_counts(events))


def by_position(drafted: list[int], accepted: list[int]) -> list[float]:
    return [a / d for a, d in zip(accepted, drafted) if d]


def acceptance_by_rank(events: list[StepEvent]) -> tuple[list[int], list[int]]:
    """Sequoia's positional acceptance, counted over tree steps: (hits, trials) per child rank,
    where trials[k] counts the reached nodes (the root and accepted nodes) with a (k+1)-th child
    and hits[k] how often that child was the accepted one. hits / trials estimates the chance
    that the k-th candidate is the one kept; a chain's rank 1 is α."""
    hits: list[int] = []
    trials: list[int] = []
    for e in events:
        if e.tree is None:
            continue
        reached = {-1, *e.tree.path}
        siblings: dict[int, list[int]] = {}
        for i, node in enumerate(e.tree.nodes):
            if node.parent in reached:
                siblings.setdefault(node.parent, []).append(i)
        for children in siblings.values():
            for rank, child in enumerate(children):
                if rank == len(trials):
                    hits.append(0)
                    trials.append(0)
                trials[rank] += 1
                hits[rank] += child in e.tree.path
    return hits, trials


def output_tokens(events: list[StepEvent]) -> list[int]:
    """The generated tokens, in order."""
    return [t for e in events for t in e.emitted]


def from_draft(events: list[StepEvent]) -> list[bool]:
    """Per generated token, whether it was a drafted token the target accepted (rather than one the
    target chose itself: a resample, a bonus, a plain step): which tokens a drafter caught."""
    return [i < e.n_accepted for e in events for i in range(len(e.emitted))]
