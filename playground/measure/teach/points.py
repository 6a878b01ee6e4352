"""Measured points, for the theory view: speedup at a γ, with the α and c behind it.

A point keeps the raw sums (accepted, tested, seconds, calls), not only ratios, so points are
pooled exactly: α = Σ accepted / Σ tested, through the engine's one pooling (events.pooled), as
the bench's summary does. Pure data, no Gradio.

c here is docs/design.md's: one draft forward ÷ one *plain* target forward (the baseline's decoding
step). The formula also assumes that verifying γ + 1 tokens costs one plain forward; on a CPU it
costs more, so each point also records that verification cost ratio, v = verify call ÷ plain step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from playground.engine.events import Costs, Tally, pooled, summarize, tally
from playground.measure.bench.summary import record_tally


@dataclass(frozen=True)
class Point:
    """One measured run pair (baseline and speculative) of one prompt at one setting."""

    pair: str
    drafter: str  # settings.MODEL or PROMPT_LOOKUP
    temperature: float
    gamma: int
    speedup: float  # measured: speculative tok/s ÷ baseline tok/s
    accepted: int
    tested: int  # draft positions tested: accepted ones and each first rejection (α's denominator)
    # Cost sums over the calls that decode only (events.costs): the first call also reads the prompt.
    drafted: int  # tokens drafted in those calls
    draft_seconds: float
    verify_seconds: float  # speculative run: seconds of its target forwards
    target_calls: int  # speculative run: target forwards
    baseline_calls: int
    baseline_seconds: float  # baseline run: seconds of its target forwards
    source: str = ""  # "race", "sweep", "measure"
    prompt: str = ""  # a short label of the prompt
    new_tokens: int = 0  # speculative run: tokens out, over all its target calls (tokens per call)
    all_calls: int = 0
    # A token tree from the same draft beside the chain, when one was measured (bench tree_fields):
    tree_shape: tuple = ()  # (budget, depth, branching, width) as configured
    tree_new_tokens: int = 0
    tree_calls: int = 0
    tree_nodes: int = 0  # nodes verified over the decoding calls (tree_node_calls)
    tree_node_calls: int = 0
    rank_hits: tuple = ()  # acceptance by child rank (events.acceptance_by_rank)
    rank_trials: tuple = ()
    draft: str = ""  # the draft model, when not the pair's own (RunConfig.draft; "": the pair's)

    @property
    def tally(self) -> Tally:
        """The point's raw sums as the engine's tally: α, c and v are read off it, and pooled with it."""
        return Tally(self.accepted, self.tested,
                     Costs(self.drafted, self.draft_seconds, self.target_calls, self.verify_seconds),
                     Costs(calls=self.baseline_calls, verify_s=self.baseline_seconds))

    @property
    def alpha(self) -> float:
        return self.tally.alpha

    @property
    def c(self) -> float:
        return self.tally.c

    @property
    def verify_cost(self) -> float:
        return self.tally.verify_cost or 0.0

    @property
    def tokens_per_call(self) -> float:
        return self.new_tokens / self.all_calls if self.all_calls else 0.0

    @property
    def tree_tokens_per_call(self) -> float:
        return self.tree_new_tokens / self.tree_calls if self.tree_calls else 0.0

    @property
    def tree_nodes_per_call(self) -> float:
        return self.tree_nodes / self.tree_node_calls if self.tree_node_calls else 0.0


@dataclass(frozen=True)
class Setting:
    """What a point was measured at and by: the pair, its drafting, T and γ, where it came from
    ("race", "sweep", "measure") and a short label of its prompt. The same for every constructor."""

    pair: str
    drafter: str  # settings.MODEL or PROMPT_LOOKUP
    temperature: float
    gamma: int
    source: str
    prompt: str = ""
    draft: str = ""  # the draft model, when not the pair's own

    def fields(self) -> dict:
        """Its values under a Point's field names (T a float and γ an int, whatever the page sent)."""
        return {**asdict(self), "temperature": float(self.temperature), "gamma": int(self.gamma)}


def point_from_record(record: dict, setting: Setting, tree_shape: tuple = ()) -> Point:
    """A point from one bench record (bench.measure.measure_prompt's fields, tree_fields too when
    the record has them)."""
    tree = {}
    if "tree_rank_hits" in record:
        tree = dict(tree_shape=tuple(tree_shape), tree_new_tokens=record["tree_new_tokens"],
                    tree_calls=record["tree_target_calls"], tree_nodes=record["tree_nodes"],
                    tree_node_calls=record["tree_cost_calls"], rank_hits=tuple(record["tree_rank_hits"]),
                    rank_trials=tuple(record["tree_rank_trials"]))
    return Point(**tree, **tally_fields(record_tally(record)), **setting.fields(),
                 new_tokens=record["new_tokens"], all_calls=record["target_calls"], speedup=record["speedup"])


def point_from_events(baseline: list, speculative: list, setting: Setting) -> Point:
    """A point from two event lists (e.g. a finished race: RaceFrame.baseline/speculative.events)."""
    a, s = summarize(baseline), summarize(speculative)
    return Point(**tally_fields(tally(speculative, baseline)),  # decoding calls only
                 **setting.fields(), speedup=s.tok_s / a.tok_s if a.tok_s else 0.0, new_tokens=s.new_tokens,
                 all_calls=s.target_calls)


def tally_fields(t: Tally) -> dict:
    """A tally's raw sums under a Point's field names (Point.tally reads them back)."""
    return {"accepted": t.accepted, "tested": t.tested, "drafted": t.cost.drafted,
            "draft_seconds": t.cost.draft_s, "verify_seconds": t.cost.verify_s, "target_calls": t.cost.calls,
            "baseline_calls": t.plain.calls, "baseline_seconds": t.plain.verify_s}


def point_from_race(frame, prompt: str = "") -> Point | None:
    """The Race tab's hook: a finished race (race.RaceFrame with done=True) as a point; None while it
    runs, or when γ was adaptive (the curve's x is a fixed γ)."""
    settings = frame.settings
    if not frame.done or settings.adaptive or not frame.speculative.events:
        return None
    return point_from_events(frame.baseline.events, frame.speculative.events,
                             Setting(settings.pair, settings.drafter, settings.temperature, settings.gamma,
                                     "race", prompt, settings.draft))


@dataclass(frozen=True)
class Pooled:
    """What the theory curve is drawn from: α and c over several points, and how v grows with γ."""

    points: int
    alpha: float
    c: float
    verify_slope: float  # k in v(γ) ≈ 1 + k·γ, least squares through (0, 1); 0 when unknown
    rank_accept: tuple[float, ...] = ()  # measured trees: chance that the k-th child is the one kept


def pool(points: list[Point]) -> Pooled | None:
    """Pool α and c over points (exact sums); None when no point drafted anything."""
    drafted = [p for p in points if p.tested]
    if not drafted:
        return None
    t = pooled(p.tally for p in drafted)
    timed = [p for p in drafted if p.verify_cost > 0]
    den = sum(p.gamma**2 for p in timed)
    slope = sum((p.verify_cost - 1) * p.gamma for p in timed) / den if den else 0.0
    return Pooled(len(drafted), t.alpha, t.c, max(0.0, slope), rank_acceptance(drafted))


def rank_acceptance(points: list[Point]) -> tuple[float, ...]:
    """Σ hits / Σ trials per child rank over the points that measured a tree."""
    ranks = max((len(p.rank_trials) for p in points), default=0)
    hits = [sum(p.rank_hits[k] for p in points if k < len(p.rank_hits)) for k in range(ranks)]
    trials = [sum(p.rank_trials[k] for p in points if k < len(p.rank_trials)) for k in range(ranks)]
    return tuple(h / t for h, t in zip(hits, trials) if t)
