"""The app's plot style: its colours, a line, a small white figure, an empty figure with a message,
and labels plotly shows as text. Every tab's figures are drawn with these, so the tabs speak one
visual language.

Figures are built from plain dicts without plotly's per-property validation, which costs ~20 ms a
figure: the race redraws three a frame, many frames a race.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, GRID = "#8c8c8c", "#2a6fdb", "#e07b00", "#e6e6e6"
# Every tab speaks one visual language: q (the draft's distribution) in purple, p (the target's) in
# the race's blue, the residual in the "resampled" orange, the bonus in the "bonus" blue.
Q_COLOR, P_COLOR = "#9b6ad6", SPEC_COLOR
RESIDUAL_COLOR, BONUS_COLOR = "#f0960f", "#3c6eeb"
KEEP_COLOR, DROP_COLOR = "#22a046", "#dc2828"
HEIGHT = 250


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


def plot_text(text: str) -> str:
    """Plotly reads a little HTML in labels: escape, so a token like '<b>' is shown, not applied."""
    return html.escape(text, quote=False)


def unique_labels(tokens: list[int], label) -> list[str]:
    """Category labels for tokens; tokens whose text coincides (e.g. two halves of a character)
    get their id appended, or plotly would merge their bars."""
    texts = [label(t) for t in tokens]
    return [plot_text(f"{x} #{t}" if texts.count(x) > 1 else x) for t, x in zip(tokens, texts, strict=True)]


def style(fig: go.Figure, height: int, left_titles: bool = True) -> None:
    """The app's look on a figure built with plotly's API; the legend sits in the top margin, clear of the
    first subplot's title."""
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
