"""The losslessness lab's figure (the Lab tab's, and the Lesson's step that draws): speculative
draws and direct draws beside the exact p."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR, style, unique_labels


def lab_figure(result, label, n: int = 12) -> go.Figure:
    """Frequencies of the likeliest first tokens: speculative draws and direct draws side by side,
    the exact p as diamonds on both."""
    tokens = result.top_tokens(n)
    x = unique_labels(tokens, label)
    draws = max(result.draws, 1)
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[
            f"speculative sampling ({result.draws} draws)",
            f"the target alone ({result.draws} draws)",
        ],
    )
    for col, counts, color, name in (
        (1, result.speculative, SPEC_COLOR, "speculative"),
        (2, result.direct, BASELINE_COLOR, "target alone"),
    ):
        fig.add_trace(
            go.Bar(
                x=x,
                y=[counts[t] / draws for t in tokens],
                name=name,
                marker_color=color,
                hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>",
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[result.exact_p[t] for t in tokens],
                mode="markers",
                name="exact p",
                marker=dict(symbol="diamond", size=11, color=THEORY_COLOR, line=dict(color="white", width=1)),
                showlegend=col == 1,
                legendgroup="p",
                hovertemplate="%{x}: p = %{y:.3f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    style(fig, height=380, left_titles=False)
    fig.update_yaxes(title_text="share of draws", row=1, col=1)
    return fig
