"""Plotly figures of a race: pure functions of the two runs' events (no Gradio, no model).

Times are each run's own clock: the cumulative compute seconds of its events (prefill
included), so the curves compare what each run cost, not when the shared CPU got to it.
Figures are built from plain dicts without plotly's per-property validation, which costs
~20 ms a figure, three figures a frame, many frames a race.
"""

from __future__ import annotations

import html

from bisect import bisect_right
from itertools import accumulate

import plotly.graph_objects as go

from playground.engine.events import StepEvent, acceptance_by_position

BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, GRID = "#8c8c8c", "#2a6fdb", "#e07b00", "#e6e6e6"
# Every tab speaks one visual language: q (the draft's distribution) in purple, p (the target's) in
# the race's blue, the residual in the "resampled" orange, the bonus in the "bonus" blue.
Q_COLOR, P_COLOR = "#9b6ad6", SPEC_COLOR
RESIDUAL_COLOR, BONUS_COLOR = "#f0960f", "#3c6eeb"
KEEP_COLOR, DROP_COLOR = "#22a046", "#dc2828"
HEIGHT = 250


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


def line(x, y, name, color, shape="linear", dash="solid", mode="lines") -> dict:
    return dict(
        type="scatter",
        x=list(x),
        y=list(y),
        name=name,
        mode=mode,
        line=dict(color=color, width=2.5, shape=shape, dash=dash),
    )


def figure(title, x_title, y_title, traces, hlines=(), y_range=None, x_dtick=None) -> go.Figure:
    """A small white figure with its legend on top; hlines are (y, label, color, dash) guides."""
    axis = dict(gridcolor=GRID, zeroline=False, linecolor="#bbbbbb", automargin=True)
    layout = dict(
        title=dict(text=title, x=0.02, font=dict(size=14)),
        height=HEIGHT,
        margin=dict(l=55, r=15, t=45, b=45),
        xaxis=dict(axis, title=dict(text=x_title), **({"dtick": x_dtick} if x_dtick else {})),
        yaxis=dict(axis, title=dict(text=y_title), **({"range": y_range} if y_range else {})),
        plot_bgcolor="white",
        paper_bgcolor="white",
        font=dict(size=11),
        uirevision="race",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1),
        shapes=[
            dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y, line=dict(color=c, dash=d, width=1.5))
            for y, _, c, d in hlines
        ],
        annotations=[
            dict(
                xref="paper",
                x=1,
                y=y,
                text=label,
                showarrow=False,
                xanchor="right",
                yanchor="bottom",
                font=dict(color=c, size=11),
            )
            for y, label, c, _ in hlines
        ],
    )
    return go.Figure(dict(data=traces, layout=layout), _validate=False)


# -- shared by the teaching and tuning tabs ------------------------------------------------------


def plot_text(text: str) -> str:
    """Plotly reads a little HTML in labels: escape, so a token like '<b>' is shown, not applied."""
    return html.escape(text, quote=False)


def unique_labels(tokens: list[int], label) -> list[str]:
    """Category labels for tokens; tokens whose text coincides (e.g. two halves of a character)
    get their id appended, or plotly would merge their bars."""
    texts = [label(t) for t in tokens]
    return [plot_text(f"{x} #{t}" if texts.count(x) > 1 else x) for t, x in zip(tokens, texts, strict=True)]


def style(fig: go.Figure, height: int, left_titles: bool = True) -> None:
    """The race's look; the legend sits in the top margin, clear of the first subplot's title."""
    fig.update_layout(
        height=height,
        margin=dict(l=60, r=15, t=70, b=30),
        plot_bgcolor="white",
        paper_bgcolor="white",
        font=dict(size=11),
        barmode="group",
        bargap=0.25,
        legend=dict(
            orientation="h",
            yref="container",
            y=0.995,
            yanchor="top",
            xanchor="right",
            x=1,
            font=dict(size=12),
        ),
    )
    fig.update_xaxes(linecolor="#bbbbbb", tickfont=dict(family="ui-monospace, monospace", size=12))
    fig.update_yaxes(gridcolor=GRID, zeroline=False, rangemode="tozero")
    titles = dict(font=dict(size=12), xanchor="left", x=0.0) if left_titles else dict(font=dict(size=12))
    fig.for_each_annotation(lambda a: a.update(**titles) if a.yref == "paper" else None)  # not the marks


def empty_figure(message: str, height: int = 250) -> go.Figure:
    fig = figure("", "", "", [])
    fig.update_layout(
        height=height,
        xaxis=dict(visible=False),
        yaxis=dict(visible=False),
        annotations=[
            dict(
                text=plot_text(message),
                showarrow=False,
                x=0.5,
                y=0.5,
                xref="paper",
                yref="paper",
                font=dict(size=13, color="#777"),
            )
        ],
    )
    return fig
