"""The drafts board's figures, for the page and the CLI's PNG alike: the speedup map (α across, c
up, the formula's best speedup over γ as contour lines for this machine's measured v(k), every
drafter a dot where it measured) and the coverage grid (the target's tokens across, a row per
drafter, coloured where its drafts supplied the token).
"""

from __future__ import annotations

from playground.measure.bench.board import table as board_table

SPEEDUP_LEVELS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0)  # labelled contour lines
ALPHAS = [i / 50 for i in range(50)] + [0.99, 0.999]  # α = 1 itself divides by zero in the formula
CAUGHT, MISSED = "#22a046", "#eef0f3"


def map_axes(rows: list[dict]) -> tuple[list[float], list[float]]:
    """α from 0 to 0.98; c from 0 to a little past the costliest drafter (at least 0.8)."""
    top = max([0.8] + [1.15 * r["c"] for r in rows])
    return ALPHAS, [top * i / 60 for i in range(61)]


def board_map_figure(report: dict):
    import plotly.graph_objects as go

    rows, v = board_table.leaderboard(report), board_table.map_curve(report)
    alphas, cs = map_axes(rows)
    speedups, gammas = board_table.speedup_grid(v, alphas, cs)
    fig = go.Figure()
    fig.add_trace(go.Contour(
        x=alphas, y=cs, z=speedups, customdata=gammas, name="formula",
        contours=dict(coloring="heatmap", showlabels=True, start=0.5, end=3.0, size=0.25,
                      labelfont=dict(size=10, color="#333")),
        colorscale=[[0, "#f4c7c3"], [0.2, "#fbeee6"], [0.2001, "#e8f4ea"], [1, "#4fa364"]], zmin=0, zmax=2.5,
        colorbar=dict(title="speedup ×"),
        hovertemplate="α %{x:.2f}, c %{y:.2f}: %{z:.2f}× at γ %{customdata}<extra></extra>"))
    fig.add_trace(go.Contour(  # the break-even line, drawn alone so it stands out
        x=alphas, y=cs, z=speedups, showscale=False, hoverinfo="skip", name="break-even",
        contours=dict(coloring="none", start=1.0, end=1.0, size=1, showlabels=False),
        line=dict(color="#b42318", width=2.5, dash="dash")))
    fig.add_trace(go.Scatter(
        x=[r["alpha"] for r in rows], y=[r["c"] for r in rows], mode="markers+text", name="drafters",
        text=[f"{r['entry']} {r['over_fastest']:.2f}×" for r in rows],
        textposition=["middle left" if r["alpha"] > 0.75 else "middle right" for r in rows],
        marker=dict(size=11, color="#1f4e9c", line=dict(color="white", width=1.5)),
        hovertemplate="%{text}<br>α %{x:.2f}, c %{y:.3f}<extra></extra>"))
    curve = ", ".join(f"{x:.2f}" for x in v[1:])
    fig.update_layout(
        title=f"Where drafting pays here: the formula's best speedup over γ ≤ {len(v) - 1} "
              f"(v(2..{len(v)}) = {curve}); dots: each drafter, measured × the fastest plain decoding",
        title_font_size=13, xaxis_title="α (acceptance)", yaxis_title="c (one draft step ÷ one target step)",
        xaxis=dict(range=[0, 1]), yaxis=dict(range=[0, cs[-1]]), height=520, margin=dict(t=70, l=60, r=20, b=50),
        showlegend=False, uirevision="board-map")
    return fig


def coverage_figure(tokens: list[str], marks: dict[str, list[bool]], title: str):
    """A token × drafter grid: green where the drafter's accepted draft supplied that token."""
    import plotly.graph_objects as go

    names = list(marks)
    z = [[1 if m else 0 for m in marks[n]] for n in names]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(tokens))), y=names, colorscale=[[0, MISSED], [1, CAUGHT]], zmin=0, zmax=1,
        showscale=False, xgap=1, ygap=2,
        customdata=[[t for t in tokens] for _ in names],
        hovertemplate="%{y}: token %{x} %{customdata}<extra></extra>"))
    fig.update_layout(title=title, title_font_size=13, height=120 + 28 * len(names),
                      margin=dict(t=50, l=140, r=20, b=40), yaxis=dict(autorange="reversed"),
                      xaxis=dict(title="position in the answer (hover for the token)"), uirevision="board-coverage")
    return fig
