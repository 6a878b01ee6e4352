"""The Theory tab's figures: the speedup curve against γ from the measured α, c and v(k), the
measured points on it, and a tree's expected length beside a chain's."""

from __future__ import annotations

import plotly.graph_objects as go

from playground.config import KNOBS
from playground.engine.sampling import expected_speedup, sloped_speedup
from playground.app.shared.plots import (BASELINE_COLOR, KEEP_COLOR, SPEC_COLOR, THEORY_COLOR, empty_figure, figure,
                                         line, plot_text)


def gamma_axis(points, best: int | None, curve=None) -> int:
    """The last γ drawn. The γ knob allows up to KNOBS["gamma"].high, but for any α a real draft
    reaches the curve rises and peaks far below that, and drawing the whole range would squash its
    shape into the left edge. So the axis runs to the adaptive schedule's default ceiling (γ max),
    and beyond it only as far as the recommended γ, a measured point or the measured v(k) need."""
    shown = [KNOBS["gamma_max"].default, *(p.gamma for p in points)]
    if best is not None:
        shown.append(best + 1)
    if curve is not None:
        shown.append(curve.max_gamma)
    return min(KNOBS["gamma"].high, max(shown))


def theory_figure(points, pooled, best: int | None, curve=None) -> go.Figure:
    """The formula's curve from the pooled α and c, the curve with this machine's verification cost
    (the measured v(k) when there is one, else the slope fitted to the points), the measured points,
    and v(γ+1) itself on a right-hand axis, so a jump in the verification cost lines up with the
    γ where the speedup bends."""
    last = gamma_axis(points, best, curve)
    gammas = list(range(last + 1))
    traces = illustrations(gammas) if pooled is None else formula_traces(gammas, pooled, curve)
    if points:
        traces.append(points_trace(points))
    tops = [y for t in traces for y in t["y"]] + [1.5]
    if curve is not None:
        traces.append(verify_trace(curve))
    fig = figure("Expected speedup against γ", "γ (tokens drafted per target call)", "speedup ×", traces,
                 hlines=[(1.0, "no gain", BASELINE_COLOR, "dot")], y_range=[0, 1.15 * max(tops)], x_dtick=1)
    fig.update_xaxes(range=[-0.5, last + 0.5])
    if curve is not None:
        top = max(2.0, 1.15 * max(curve.v))
        fig.update_layout(
            yaxis2=dict(title=dict(text="v(γ+1): verify ÷ plain step"), overlaying="y", side="right",
                        range=[0, top], showgrid=False, zeroline=False),
            margin=dict(r=60),
        )
    if best is not None:
        fig.add_vline(x=best, line=dict(color=THEORY_COLOR, width=1, dash="dot"),
                      annotation_text=f"recommended γ = {best}", annotation_position="top left")
    fig.update_layout(height=380, uirevision="theory")
    return fig


def illustrations(gammas: list[int]) -> list[dict]:
    """What the curve looks like for a few α, until there is a measurement."""
    return [line(gammas, [expected_speedup(alpha, g, 0.1) for g in gammas],
                 f"illustration: α = {alpha}, c = 0.1", "#c8c8c8", dash="dot") for alpha in (0.5, 0.7, 0.9)]


def formula_traces(gammas: list[int], pooled, curve=None) -> list[dict]:
    """The paper's formula at the pooled α and c (v = 1), and beside it the same with this machine's
    verification cost: the measured v(γ+1) where there is a curve, else the slope fitted to the
    points."""
    a, c, k = pooled.alpha, pooled.c, pooled.verify_slope
    traces = [line(gammas, [expected_speedup(a, g, c) for g in gammas],
                   f"formula: α = {a:.2f}, c = {c:.2f} (v = 1)", THEORY_COLOR, mode="lines+markers")]
    if curve is not None:
        measured = list(range(curve.max_gamma + 1))
        traces.append(line(measured, [expected_speedup(a, g, c, curve.v) for g in measured],
                           "with this machine's measured v(γ+1)", THEORY_COLOR, dash="dash",
                           mode="lines+markers"))
    elif k > 0:
        traces.append(line(gammas, [sloped_speedup(a, g, c, k) for g in gammas],
                           f"with this machine's verification cost (1 + {k:.2f}γ)", THEORY_COLOR,
                           dash="dash"))
    return traces


def points_trace(points) -> dict:
    """The speedups measured in this session, a dot each, with what was measured on hover."""
    return dict(type="scatter", mode="markers", name="measured here", x=[p.gamma for p in points],
                y=[p.speedup for p in points],
                marker=dict(color=SPEC_COLOR, size=11, line=dict(color="white", width=1.5)),
                text=[point_hover(p) for p in points], hovertemplate="%{text}<extra></extra>")


MAX_NODES = 64  # draft nodes per target call on the tree figure's x axis


def tree_length_figure(points, pooled) -> go.Figure:
    """Expected tokens per target call against the draft nodes verified per call: a chain of γ
    nodes (the paper's 1 + α + … + α^γ) beside the best tree of as many nodes under the measured
    acceptance by child rank (Sequoia's positional model, tree.expected_tree_tokens), with the
    measured chains and trees on top. The chain flattens at 1 / (1 − α); a tree keeps gaining
    where the draft's second guesses are often the target's choice."""
    from playground.engine.tree import expected_tree_tokens

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
