"""The Step-through's figure: q and p of each drafted position, the verdict, and the outcome
(residual or bonus); a pure function of one StepEvent."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.engine.events import ACCEPTED, BONUS, StepEvent
from playground.app.shared.plots import (BONUS_COLOR, DROP_COLOR, KEEP_COLOR, P_COLOR, Q_COLOR, RESIDUAL_COLOR, plot_text, style,
                    unique_labels)

BARS = 8  # tokens drawn per distribution


def step_figure(event: StepEvent, label, greedy: bool) -> go.Figure:
    """q and p side by side at every tested draft position, then the residual or the bonus."""
    tested = event.drafts[: event.n_tested]
    titles = [position_title(i, d, label, greedy) for i, d in enumerate(tested)] + [
        outcome_title(event, label, greedy)
    ]
    fig = make_subplots(rows=len(titles), cols=1, subplot_titles=titles, vertical_spacing=0.34 / len(titles))
    for row, d in enumerate(tested, start=1):
        add_q_and_p(fig, row, d, label, first=row == 1)
    add_outcome(fig, len(titles), event, label, greedy)
    style(fig, height=120 + 190 * len(titles))
    return fig


def position_title(i: int, d, label, greedy: bool) -> str:
    guess = plot_text(label(d.token))
    if greedy:
        rule = "the target's top token" if d.fate == ACCEPTED else "not the target's top token"
        return f"position {i + 1}: guess “{guess}” is {rule} → {'kept' if d.fate == ACCEPTED else 'rejected'}"
    sign = "<" if d.fate == ACCEPTED else "≥"
    return (
        f"position {i + 1}: guess “{guess}”  min(1, p/q) = {d.accept_prob:.2f},  u = {d.uniform:.2f} "
        f"{sign} {d.accept_prob:.2f} → {'kept' if d.fate == ACCEPTED else 'rejected'}"
    )


def outcome_title(event: StepEvent, label, greedy: bool) -> str:
    token = plot_text(label(event.next_token))
    if event.next_fate == BONUS:
        return f"bonus: p at the next position; the target draws “{token}”"
    if not event.drafts:
        return f"plain step: p; the target draws “{token}”"
    if greedy:
        return f"replacement: the target's top token “{token}”"
    return f"residual norm(max(0, p − q)) at the rejected position; the target draws “{token}”"


def add_q_and_p(fig: go.Figure, row: int, d, label, first: bool) -> None:
    """Grouped bars over the likeliest tokens of either model; the guess boxed in its fate's colour."""
    q, p = dict(d.top_q), dict(d.top_p)
    q[d.token], p[d.token] = d.q, d.p  # the guess's own values are exact even outside the tops
    tokens = sorted(
        set(list(q)[:BARS] + list(p)[:BARS]) | {d.token}, key=lambda t: -max(q.get(t, 0), p.get(t, 0))
    )
    tokens = tokens[:BARS] if d.token in tokens[:BARS] else tokens[: BARS - 1] + [d.token]
    x = unique_labels(tokens, label)
    for name, probs, color in (("q: draft", q, Q_COLOR), ("p: target", p, P_COLOR)):
        fig.add_trace(
            go.Bar(
                x=x,
                y=[probs.get(t, 0.0) for t in tokens],
                name=name,
                marker_color=color,
                showlegend=first,
                legendgroup=name,
                hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>",
            ),
            row=row,
            col=1,
        )
    mark = KEEP_COLOR if d.fate == ACCEPTED else DROP_COLOR
    box(fig, row, tokens.index(d.token), max(q[d.token], p[d.token]), "guess", mark)
    fig.update_yaxes(title_text="probability", row=row, col=1)


def add_outcome(fig: go.Figure, row: int, event: StepEvent, label, greedy: bool) -> None:
    top = event.residual_top if event.residual_top else event.next_top
    probs = dict(top[:BARS])
    probs.setdefault(event.next_token, event.next_p)
    tokens = sorted(probs, key=lambda t: -probs[t])
    color = BONUS_COLOR if event.next_fate == BONUS else RESIDUAL_COLOR if event.residual_top else P_COLOR
    name = "residual" if event.residual_top else "p: target"
    fig.add_trace(
        go.Bar(
            x=unique_labels(tokens, label),
            y=[probs[t] for t in tokens],
            name=name,
            marker_color=color,
            showlegend=bool(event.residual_top),
            hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>",
        ),
        row=row,
        col=1,
    )
    box(fig, row, tokens.index(event.next_token), probs[event.next_token], "drawn", "#222")
    fig.update_yaxes(title_text="probability", row=row, col=1)


def box(fig: go.Figure, row: int, index: int, height: float, text: str, color: str) -> None:
    """Frame one category (categories sit at 0, 1, 2, … on their axis) and label it above."""
    fig.add_shape(
        type="rect",
        x0=index - 0.46,
        x1=index + 0.46,
        y0=0,
        y1=height,
        line=dict(color=color, width=2.5),
        fillcolor="rgba(0,0,0,0)",
        row=row,
        col=1,
    )
    fig.add_annotation(
        x=index,
        y=height,
        text=text,
        showarrow=True,
        arrowhead=0,
        ax=0,
        ay=-16,
        font=dict(size=11, color=color),
        row=row,
        col=1,
    )
