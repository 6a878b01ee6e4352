"""The race's figures: pure functions of the two runs' events (no Gradio, no model).

Times are each run's own clock: the cumulative compute seconds of its events (prefill
included), so the curves compare what each run cost, not when the shared CPU got to it.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import plotly.graph_objects as go

from playground.engine.events import StepEvent, acceptance_by_position
from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, figure, line


def clock_and_tokens(events: list[StepEvent]) -> tuple[list[float], list[int]]:
    """(seconds, tokens generated) after each event, starting at (0, 0)."""
    seconds = [0.0] + list(accumulate(e.seconds for e in events))
    tokens = [0] + list(accumulate(len(e.emitted) for e in events))
    return seconds, tokens


def tokens_over_time(baseline: list[StepEvent], speculative: list[StepEvent]) -> go.Figure:
    """Tokens generated against each run's own clock; the steeper line is faster."""
    traces = []
    for name, events, color in (
        ("autoregressive", baseline, BASELINE_COLOR),
        ("speculative", speculative, SPEC_COLOR),
    ):
        x, y = clock_and_tokens(events)
        traces.append(line(x, y, name, color, shape="hv"))
    return figure("Tokens generated over time", "seconds of compute (each run's own clock)", "tokens", traces)


def running_speedup(
    baseline: list[StepEvent], speculative: list[StepEvent], predicted: float | None = None
) -> go.Figure:
    """Speculative tok/s over autoregressive tok/s, each measured up to the same moment t of
    compute (a run already finished keeps its final rate); ends at the measured speedup."""
    x, y = speedup_curve(baseline, speculative)
    guides = [(1.0, "no gain", BASELINE_COLOR, "dot")]
    if predicted:
        guides.append((predicted, f"formula {predicted:.2f}×", THEORY_COLOR, "dash"))
    # The first steps are noisy (a ratio of two small counts); keep the axis on the settled part.
    top = max([2.0, 1.3 * (predicted or 0)] + [1.3 * v for v in y[len(y) // 3 :]])
    return figure(
        "Running speedup (measured)",
        "seconds of compute",
        "speedup ×",
        [line(x, y, "measured", SPEC_COLOR)],
        hlines=guides,
        y_range=[0, top],
    )


def speedup_curve(
    baseline: list[StepEvent], speculative: list[StepEvent], settle: int = 4
) -> tuple[list[float], list[float]]:
    """(t, speedup) at every event time of either run once both have produced `settle` tokens
    (or finished): before that the ratio of two tiny counts is noise."""
    (xa, ya), (xs, ys) = clock_and_tokens(baseline), clock_and_tokens(speculative)
    starts = [
        next((x[i] for i in range(1, len(x)) if y[i] >= settle), x[-1]) for x, y in ((xa, ya), (xs, ys))
    ]
    if len(xa) < 2 or len(xs) < 2:
        return [], []
    times = sorted(t for t in set(xa[1:] + xs[1:]) if t >= max(starts))
    points = [(t, rate_at(xs, ys, t) / rate_at(xa, ya, t)) for t in times]
    return [t for t, _ in points], [s for _, s in points]


def rate_at(x: list[float], y: list[int], t: float) -> float:
    """Tokens per second of a run over its compute up to t (its last event at or before t)."""
    i = bisect_right(x, t) - 1
    return y[i] / x[i] if x[i] > 0 else 0.0


def acceptance_by_position_figure(speculative: list[StepEvent], alpha: float | None = None) -> go.Figure:
    """Share of drafts kept at each draft position; under the paper's i.i.d. model it is α^i."""
    rates = acceptance_by_position(speculative)
    positions = list(range(1, len(rates) + 1))
    traces = [dict(type="bar", x=positions, y=rates, name="measured", marker=dict(color=SPEC_COLOR))]
    if alpha is not None and rates:
        traces.append(
            line(
                positions,
                [alpha**i for i in positions],
                "α^i (theory)",
                THEORY_COLOR,
                dash="dash",
                mode="lines+markers",
            )
        )
    return figure(
        "Acceptance by draft position",
        "draft position",
        "share accepted",
        traces,
        y_range=[0, 1.05],
        x_dtick=1,
    )
