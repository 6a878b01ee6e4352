"""Where a greedy speculative run left the baseline's path, and whether that was a near-tie.

In float32 greedy speculation reproduces the baseline token for token. In bf16 or quantized
modes, verifying several tokens in one forward rounds differently from one-token steps, so a
near-tie between the target's top two tokens can flip. The top-2 logit margin at the first
differing position, in each run, tells a numerical tie (margin ~ rounding error) from a bug
(a clear winner that was not chosen).
"""

from __future__ import annotations

import math

from playground.engine.events import StepEvent

MARGIN_CAP = 100.0  # reported when the runner-up's probability underflowed to 0 (margin > ~87)


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


def margins_by_position(events: list[StepEvent]) -> list[float | None]:
    """The target's top-2 margin at each output position, from events recorded with detail >= 2.

    An accepted draft token's margin comes from the target row that verified it (`top_p`), the
    token the target added itself from `next_top`; tokens cut at EOS or the budget are dropped.
    """
    margins: list[float | None] = []
    for e in events:
        rows = [d.top_p for d in e.drafts[: e.n_accepted]] + [e.next_top]
        margins.extend(top2_margin(row) for row in rows[: len(e.emitted)])
    return margins


def margin_at(events: list[StepEvent], position: int) -> float | None:
    margins = margins_by_position(events)
    return margins[position] if position < len(margins) else None
