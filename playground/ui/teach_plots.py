"""Plotly figures of the teaching and tuning views: pure functions of events and results.

Colours follow the race (plots.py) and the fate colours of render.py, so every tab speaks one
visual language: q (the draft's distribution) in purple, p (the target's) in the race's blue,
the residual in the "resampled" orange, the bonus in the "bonus" blue.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..events import ACCEPTED, BONUS, StepEvent
from ..sampling import expected_speedup, sloped_speedup
from .sweep import ROW_LABELS
from .plots import BASELINE_COLOR, GRID, SPEC_COLOR, THEORY_COLOR, figure, line

Q_COLOR, P_COLOR = "#9b6ad6", SPEC_COLOR
RESIDUAL_COLOR, BONUS_COLOR = "#f0960f", "#3c6eeb"
KEEP_COLOR, DROP_COLOR = "#22a046", "#dc2828"
BARS = 8  # tokens drawn per distribution
MAX_GAMMA = 16


def plot_text(text: str) -> str:
    """Plotly reads a little HTML in labels: escape, so a token like '<b>' is shown, not applied."""
    return html.escape(text, quote=False)


def unique_labels(tokens: list[int], label) -> list[str]:
    """Category labels for tokens; tokens whose text coincides (e.g. two halves of a character)
    get their id appended, or plotly would merge their bars."""
    texts = [label(t) for t in tokens]
    return [plot_text(f"{x} #{t}" if texts.count(x) > 1 else x) for t, x in zip(tokens, texts, strict=True)]


# -- step-through -------------------------------------------------------------------------------


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


# -- theory vs measurement ------------------------------------------------------------------------


def theory_figure(points, pooled, best: int | None, curve=None) -> go.Figure:
    """The formula's curve from the pooled α and c, the curve with this machine's verification cost
    (the measured v(k) when there is one, else the slope fitted to the points), the measured points,
    and v(γ+1) itself on a right-hand axis, so a jump in the verification cost lines up with the
    γ where the speedup bends."""
    gammas = list(range(MAX_GAMMA + 1))
    traces, guides = [], [(1.0, "no gain", BASELINE_COLOR, "dot")]
    if pooled is None:
        for alpha in (0.5, 0.7, 0.9):  # what the curve looks like, until there is a measurement
            traces.append(
                line(
                    gammas,
                    [expected_speedup(alpha, g, 0.1) for g in gammas],
                    f"illustration: α = {alpha}, c = 0.1",
                    "#c8c8c8",
                    dash="dot",
                )
            )
    else:
        a, c, k = pooled.alpha, pooled.c, pooled.verify_slope
        traces.append(
            line(
                gammas,
                [expected_speedup(a, g, c) for g in gammas],
                f"formula: α = {a:.2f}, c = {c:.2f} (v = 1)",
                THEORY_COLOR,
                mode="lines+markers",
            )
        )
        if curve is not None:
            measured = list(range(curve.max_gamma + 1))
            traces.append(
                line(
                    measured,
                    [expected_speedup(a, g, c, curve.v) for g in measured],
                    "with this machine's measured v(γ+1)",
                    THEORY_COLOR,
                    dash="dash",
                    mode="lines+markers",
                )
            )
        elif k > 0:
            traces.append(
                line(
                    gammas,
                    [sloped_speedup(a, g, c, k) for g in gammas],
                    f"with this machine's verification cost (1 + {k:.2f}γ)",
                    THEORY_COLOR,
                    dash="dash",
                )
            )
    if points:
        traces.append(
            dict(
                type="scatter",
                mode="markers",
                name="measured here",
                x=[p.gamma for p in points],
                y=[p.speedup for p in points],
                marker=dict(color=SPEC_COLOR, size=11, line=dict(color="white", width=1.5)),
                text=[point_hover(p) for p in points],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    tops = [y for t in traces for y in t["y"]] + [1.5]
    if curve is not None:
        traces.append(verify_trace(curve))
    fig = figure(
        "Expected speedup against γ",
        "γ (tokens drafted per target call)",
        "speedup ×",
        traces,
        hlines=guides,
        y_range=[0, 1.15 * max(tops)],
        x_dtick=1,
    )
    fig.update_xaxes(range=[-0.5, MAX_GAMMA + 0.5])
    if curve is not None:
        top = max(2.0, 1.15 * max(curve.v))
        fig.update_layout(
            yaxis2=dict(title=dict(text="v(γ+1): verify ÷ plain step"), overlaying="y", side="right",
                        range=[0, top], showgrid=False, zeroline=False),
            margin=dict(r=60),
        )
    if best is not None:
        fig.add_vline(
            x=best,
            line=dict(color=THEORY_COLOR, width=1, dash="dot"),
            annotation_text=f"recommended γ = {best}",
            annotation_position="top left",
        )
    fig.update_layout(height=380, uirevision="theory")
    return fig


MAX_NODES = 64  # draft nodes per target call on the tree figure's x axis


def tree_length_figure(points, pooled) -> go.Figure:
    """Expected tokens per target call against the draft nodes verified per call: a chain of γ
    nodes (the paper's 1 + α + … + α^γ) beside the best tree of as many nodes under the measured
    acceptance by child rank (Sequoia's positional model, tree.expected_tree_tokens), with the
    measured chains and trees on top. The chain flattens at 1 / (1 − α); a tree keeps gaining
    where the draft's second guesses are often the target's choice."""
    from ..tree import expected_tree_tokens

    trees = [p for p in points if p.tree_calls]
    if pooled is None or not pooled.rank_accept or not trees:
        return empty_figure("Chain or tree? Measure with the draft model: a tree is grown beside the chain, "
                            "and its length is drawn here against the chain's.", height=300)
    a, ranks = pooled.alpha, pooled.rank_accept
    _, depth, branching, _ = trees[-1].tree_shape
    nodes = list(range(1, MAX_NODES + 1))
    ranks_text = ", ".join(f"{r:.2f}" for r in ranks)
    traces = [
        line(nodes, [expected_tree_tokens((a,), n, n, 1) for n in nodes], f"chain of n nodes: α = {a:.2f}",
             THEORY_COLOR),
        line(nodes, [expected_tree_tokens(ranks, n, n, branching) for n in nodes],
             f"best tree of n nodes ({branching} children), acceptance by rank {ranks_text}", KEEP_COLOR),
        line(nodes, [expected_tree_tokens(ranks, n, depth, branching) for n in nodes],
             f"the same, at most {depth} levels deep (the tree measured)", KEEP_COLOR, dash="dash"),
        dict(type="scatter", mode="markers", name="chains measured here", x=[p.gamma for p in points],
             y=[p.tokens_per_call for p in points], marker=dict(color=SPEC_COLOR, size=10),
             hovertemplate="chain, γ = %{x}: %{y:.2f} tokens per call<extra></extra>"),
        dict(type="scatter", mode="markers", name="trees measured here", x=[p.tree_nodes_per_call for p in trees],
             y=[p.tree_tokens_per_call for p in trees], marker=dict(color=KEEP_COLOR, size=10, symbol="diamond"),
             hovertemplate="tree, %{x:.1f} nodes per call: %{y:.2f} tokens per call<extra></extra>"),
    ]
    tops = [y for t in traces for y in t["y"]]
    fig = figure("Tokens per target call: a chain against a tree of as many draft nodes",
                 "draft nodes verified per target call (a chain's γ)", "tokens per target call", traces,
                 y_range=[0, 1.1 * max(tops)])
    fig.update_layout(height=340, uirevision="tree-length")
    return fig


def verify_trace(curve) -> dict:
    """v(γ+1) as grey bars at each γ: what one verification costs, in plain target steps."""
    gammas = list(range(curve.max_gamma + 1))
    return dict(
        type="bar",
        x=gammas,
        y=[curve.v[g] for g in gammas],
        yaxis="y2",
        name=f"v(γ+1), measured (plain step {curve.step_s * 1000:.0f} ms)",
        marker=dict(color="rgba(120,120,120,0.25)"),
        hovertemplate="γ = %{x}: verifying γ+1 tokens costs %{y:.2f} plain steps<extra></extra>",
    )


def point_hover(p) -> str:
    return (
        f"{p.source} · {plot_text(p.prompt)}<br>γ = {p.gamma}, {p.drafter}, T = {p.temperature:g}<br>"
        f"speedup {p.speedup:.2f}×, α = {p.alpha:.2f}, c = {p.c:.2f}, verify ×{p.verify_cost:.2f}"
    )


# -- losslessness lab --------------------------------------------------------------------------


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


# -- sweep --------------------------------------------------------------------------------------


def sweep_figure(rows: list[dict], key: str, title: str, y_title: str) -> go.Figure:
    """One line per (drafter, draft settings, temperature) of `key` against γ."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["drafter"], r.get("draft", ""), r["temperature"]), []).append(r)
    palette = [SPEC_COLOR, THEORY_COLOR, "#22a046", "#9b6ad6", "#dc2828", "#8c564b", "#17becf"]
    traces = []
    for i, ((drafter, draft, temperature), group) in enumerate(sorted(groups.items())):
        group = sorted(group, key=lambda r: r["gamma"])
        traces.append(
            line(
                [r["gamma"] for r in group],
                [r[key] for r in group],
                ", ".join(filter(None, [ROW_LABELS.get(drafter, drafter), draft, f"T = {temperature:g}"])),
                palette[i % len(palette)],
                mode="lines+markers",
            )
        )
    hlines = [(1.0, "no gain", BASELINE_COLOR, "dot")] if key == "speedup" else []
    top = max([1.5] + [r[key] for r in rows])
    y_range = [0, 1.05] if key == "alpha" else [0, 1.15 * top]
    fig = figure(title, "γ", y_title, traces, hlines=hlines, y_range=y_range, x_dtick=1)
    fig.update_layout(height=320, uirevision="sweep")
    return fig
