"""Where a greedy speculative run left the baseline's path, and whether that was a near-tie.

In float32 greedy speculation reproduces the baseline token for token. In bf16 or quantized
modes, verifying several tokens in one forward rounds differently from one-token steps, so a
near-tie between the target's top two tokens can flip. The top-2 logit margin at the first
differing position, in each run, tells a numerical tie (margin ~ rounding error) from a bug
(a clear winner that was not chosen). The benchmark reports it per prompt; the app's race and
lesson show it with the tokens and the verdict (`found`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from playground.engine.events import StepEvent

MARGIN_CAP = 100.0  # reported when the runner-up's probability underflowed to 0 (margin > ~87)
# Logits: a first divergence whose top-2 margin stays below this in both runs is a near-tie, one a
# forward over several rows can round the other way. The largest seen (docs/benchmarks.md): 0.18 on
# a CPU's int4 kernels (llama.cpp's, ONNX Runtime's), 0.125 in bf16 on a CPU, 1.0 in bf16 on a GPU.
# A bug (a wrong token kept, a cache not rolled back) passes over a clear winner instead.
NEAR_TIE = 1.0


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, the shorter length if one is a prefix of the other,
    or None when the sequences are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_margin(top: tuple[tuple[int, float], ...]) -> float | None:
    """logit(top1) - logit(top2) from the top-2 (token, probability) pairs of a softmax row.

    Softmax is shift invariant, so log p1 - log p2 equals the logit difference exactly.
    """
    if len(top) < 2:
        return None
    p1, p2 = top[0][1], top[1][1]
    if p2 <= 0:
        return MARGIN_CAP
    return min(math.log(p1) - math.log(p2), MARGIN_CAP)


def top_rows(events: list[StepEvent]) -> list[tuple[tuple[int, float], ...]]:
    """The target's top (token, probability) row behind each output position, from events recorded
    with detail >= 2: an accepted draft token's from the target row that verified it (`top_p`), the
    token the target added itself from `next_top`; tokens cut at EOS or the budget are dropped."""
    rows = []
    for e in events:
        rows.extend(([d.top_p for d in e.drafts[: e.n_accepted]] + [e.next_top])[: len(e.emitted)])
    return rows


def margins_by_position(events: list[StepEvent]) -> list[float | None]:
    """The target's top-2 margin at each output position (see top_rows)."""
    return [top2_margin(row) for row in top_rows(events)]


def margin_at(events: list[StepEvent], position: int) -> float | None:
    margins = margins_by_position(events)
    return margins[position] if position < len(margins) else None


def near_tie(margins) -> bool | None:
    """Whether every measured margin is below NEAR_TIE; None when none was measured."""
    known = [m for m in margins if m is not None]
    return None if not known else max(known) < NEAR_TIE


def reruns(target, ids: list[int], config, drafter, eos, position: int,
           stopped=lambda: False) -> tuple[list[StepEvent], list[StepEvent]]:
    """Untimed reruns of both runs with detail (recording top tokens costs time, so timed runs do not),
    to `position` and a step past it. Greedy reruns retrace the same path; the budget keeps every draft
    up to `position` full length, so each forward has the same shape. `drafter`: a fresh one.
    `stopped()` is asked after each step: once true, what was run so far is returned."""
    from dataclasses import replace

    from playground.engine.generate import generate  # torch: not at import

    budget = min(config.max_new_tokens, position + config.gamma + 2)
    detailed = replace(config, detail=2, max_new_tokens=budget)

    def run(drafter_) -> list[StepEvent]:
        events, stream = [], generate(target, ids, detailed, drafter_, eos_token_ids=eos)
        for event in stream:
            events.append(event)
            if stopped():
                stream.close()
                break
        return events

    return run(None), run(drafter)


@dataclass(frozen=True)
class Side:
    """One run at the first differing position."""

    token: int | None  # the token this run put there; None: it had ended before
    top: tuple[tuple[int, float], ...]  # the target's top (token, probability) there, from the rerun; () unknown
    margin: float | None  # logit(top1) - logit(top2) there; None: the rerun ended before it


@dataclass(frozen=True)
class Divergence:
    """The evidence at a greedy run's first divergence: each run's token and the target's top two there."""

    position: int  # 0-based index of the first differing output token
    plain: Side
    speculative: Side
    exact: bool  # the target runs in float32, unquantized: greedy identity must hold token for token

    @property
    def near_tie(self) -> bool | None:
        return near_tie((self.plain.margin, self.speculative.margin))

    @property
    def excused(self) -> bool:
        """A rounding near-tie where rounding is allowed (not float32): the output is still the target's."""
        return bool(self.near_tie) and not self.exact

    @property
    def tokens(self) -> set[int]:
        """Every token id the evidence names (for a caller to decode)."""
        return {t for s in (self.plain, self.speculative) for t in [s.token, *(x for x, _ in s.top[:2])]
                if t is not None}


def found(target, ids: list[int], config, make_drafter, eos, runs: tuple[list[int], list[int]], exact: bool,
          stopped=lambda: False) -> Divergence | None:
    """The evidence at the first token where a greedy run's tokens left the plain run's (`runs`: plain's,
    speculative's), from reruns with detail (`make_drafter()`: a fresh drafter; `stopped`: as reruns takes
    it); None where they are equal."""
    plain, speculative = runs
    position = first_divergence(plain, speculative)
    if position is None:
        return None
    base, spec = reruns(target, ids, config, make_drafter(), eos, position, stopped)

    def side(tokens: list[int], events: list[StepEvent]) -> Side:
        rows = top_rows(events)
        top = rows[position][:2] if position < len(rows) else ()
        return Side(tokens[position] if position < len(tokens) else None, top, top2_margin(top) if top else None)

    return Divergence(position, side(plain, base), side(speculative, spec), exact)
