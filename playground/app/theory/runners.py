"""The Theory tab's runner section: c and v(k) of the chosen pair through each runner, measured
here, side by side with the formula's speedup per runner, and why they differ, in words.

Pure functions of measured RunnerCosts (measure/teach/theory.py) and the pooled α; no Gradio. Every number
drawn is a measurement of this session; the figures from docs/benchmarks.md appear only in the prose,
as examples of what other machines measured.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from playground.config import KNOBS
from playground.engine.sampling import best_gamma, verify_cost
from playground.measure.teach.tree_budget import CHEAP_V, cheap_budget
from playground.app.shared.plots import BASELINE_COLOR, KEEP_COLOR, SPEC_COLOR, THEORY_COLOR, empty_figure, figure, line

COLORS = {"eager": SPEC_COLOR, "static": KEEP_COLOR, "compiled": THEORY_COLOR}
OTHER = ("#9b6ad6", "#dc2828", "#555555")  # runners beyond the three (llama.cpp, …)
HEIGHT = 320
LAUNCH_BOUND_C = 0.8  # a draft this close to a target step costs what its launches do, not its size
JUMP = 0.3  # a rise of v between neighbouring k this large is a step of the kernel, not noise or a slope

WHY = (
    "<p><b>Why c is not the size ratio.</b> On a GPU at batch 1 a small model's step is "
    "<i>launch-bound</i>: each of its layers' small kernels waits on its own launch and latency, "
    "not on the bytes it reads, so a 0.5B draft (24 layers) costs nearly what a 1.5B target (28 layers) "
    "does in eager PyTorch (one H200 measured 18.1 against 18.9 ms, c ≈ 0.96: speculation "
    "then loses). Compiling the steps and replaying them as CUDA graphs takes the launches away; "
    "drafts that pay there are cheap per step by construction (prompt lookup, an early-exit draft) "
    "or set against a much larger target.</p>"
    "<p><b>Why verification is flat on a GPU.</b> A forward at small batch is <i>memory-bound</i>: "
    "the weights are read once for all k rows, and k = 5 rows cost about one row (v(5) = 1.17 on "
    "that H200).</p>"
    "<p><b>Why it climbs on some CPU kernels.</b> Where the arithmetic no longer hides behind "
    "reading the weights the forward is <i>compute-bound</i>; the int4 CPU kernel also works on "
    "blocks of rows, so v is flat-ish to four rows and jumps at five (a 2-core Xeon measured "
    "v(4) = 1.41, v(5) = 2.34). There the best γ stops before the jump, and a wide tree costs "
    "several plain steps to verify.</p>"
    "<p><b>Why a faster step shrinks speculation's relative gain.</b> A runner that makes the target's "
    "step cheaper makes plain decoding faster at once (ONNX Runtime's int4 kernels: the 1.5B target "
    "at about 60 ms a step against PyTorch's 90 on a 2-core Xeon). Speculation's gain is a ratio, "
    "and what it pays per round does not shrink in proportion: the draft's step, the engine's fixed "
    "work per step, and a verification that climbs where the kernel is compute-bound (v(3) ≈ 1.5 "
    "there). So c and v(γ + 1) grow relative to the step, the best γ and the speedup fall, and the "
    "tokens per second still go up.</p>"
)


def color(runner: str, i: int) -> str:
    return COLORS.get(runner) or OTHER[i % len(OTHER)]


def v_figure(costs: dict) -> go.Figure:
    """v(k) of the target through each measured runner, one line each."""
    if not costs:
        return empty_figure("Press “Measure c and v(k) per runner”: a few forwards of each model "
                            "through each runner chosen.", HEIGHT)
    traces = []
    for i, (runner, cost) in enumerate(costs.items()):
        ks = list(range(1, len(cost.target.v) + 1))
        trace = line(ks, cost.target.v, f"{runner}: step {cost.target.step_s * 1000:.1f} ms, c = {cost.c:.2f}",
                     color(runner, i), mode="lines+markers")
        trace["hovertemplate"] = f"{runner}, k = %{{x}}: %{{y:.2f}} plain steps<extra></extra>"
        traces.append(trace)
    top = max(max(cost.target.v) for cost in costs.values())
    fig = figure("v(k): one target forward over k tokens ÷ one plain step", "k (tokens in one forward)",
                 "plain steps", traces, hlines=[(1.0, "one step", BASELINE_COLOR, "dot")],
                 y_range=[0, max(2.0, 1.15 * top)], x_dtick=1)
    fig.update_layout(height=HEIGHT, uirevision="runner-v")
    return fig


def speedup_figure(costs: dict, alpha: float | None, gamma: int) -> go.Figure:
    """The formula's speedup against γ per runner, fed this session's α and each runner's own c
    and v(γ + 1): over that runner's plain run (solid) and over the fastest plain step measured of
    any runner (dotted: the run a user would make instead)."""
    if not costs:
        return empty_figure("The formula's speedup per runner appears here once c and v(k) are measured.", HEIGHT)
    if alpha is None:
        return empty_figure("The speedup per runner needs α: press “Measure α and c now” above (or race "
                            "in the Race tab) with the draft model.", HEIGHT)
    fastest = min(cost.target.step_s for cost in costs.values())
    traces = []
    for i, (runner, cost) in enumerate(costs.items()):
        gammas = list(range(len(cost.target.v)))
        own = [cost.speedup(alpha, g) for g in gammas]
        traces.append(line(gammas, own, f"{runner}", color(runner, i), mode="lines+markers"))
        if len(costs) > 1:
            scale = fastest / cost.target.step_s
            traces.append(line(gammas, [s * scale for s in own], f"{runner}, over the fastest plain step",
                               color(runner, i), dash="dot"))
    tops = [y for t in traces for y in t["y"]] + [1.5]
    fig = figure(f"Predicted speedup per runner (α = {alpha:.2f})", "γ", "speedup ×", traces,
                 hlines=[(1.0, "no gain", BASELINE_COLOR, "dot")], y_range=[0, 1.15 * max(tops)], x_dtick=1)
    fig.add_vline(x=gamma, line=dict(color="#999", width=1, dash="dot"), annotation_text=f"γ = {gamma}")
    fig.update_layout(height=HEIGHT, uirevision="runner-speedup")
    return fig


def jumps(v) -> list[int]:
    """The k where v rises by more than JUMP over k − 1."""
    return [k + 1 for k in range(1, len(v)) if v[k] - v[k - 1] > JUMP]


def reading(runner: str, cost) -> str:
    """What this runner's measured c and v(k) say, in a sentence."""
    v = cost.target.v
    if cost.c >= LAUNCH_BOUND_C:
        c_text = (f"the draft costs {cost.c:.2f} of a target step, nearly all of it: its step is set by "
                  "per-kernel latency (launch-bound), not by its size")
    else:
        c_text = f"the draft costs {cost.c:.2f} of a target step"
    found = jumps(v)
    if found:
        v_text = (f"verification climbs, with a jump at k = {', '.join(map(str, found))}: compute-bound, or a "
                  "kernel working on blocks of rows")
    elif max(v) <= CHEAP_V:
        v_text = f"verification stays flat to k = {len(v)} (v ≤ {max(v):.2f}): memory-bound, the weights read once for all rows"
    else:
        v_text = f"verification grows steadily, to {v[-1]:.2f} plain steps at k = {len(v)}"
    return f"<b>{html.escape(runner)}</b>: {c_text}; {v_text}."


def runners_html(costs: dict, alpha: float | None, gamma: int, what: str) -> str:
    """A table per runner (steps, c, v(γ + 1), the formula's speedup, best γ, a cheap tree budget),
    what each measured curve says, and why, in prose."""
    if not costs:
        return (f'<div class="theory"><p>No runner measured yet for {html.escape(what)}. Pick runners and press '
                f"<b>Measure c and v(k) per runner</b>.</p>{WHY}</div>")
    cap = KNOBS["tree_budget"].default
    head = ("<tr><td>runner</td><td>target step</td><td>draft step</td><td>c</td><td>v(γ+1)</td>"
            "<td>speedup at γ</td><td>best γ</td><td>tree budget</td></tr>")
    rows = []
    for runner, cost in costs.items():
        v = cost.target.v
        g = min(gamma, len(v) - 1)
        at = f"{cost.speedup(alpha, g):.2f}× (γ {g})" if alpha is not None else "needs α"
        best = best_gamma(alpha, cost.steps, KNOBS["gamma"].high, v) if alpha is not None else "–"
        budget = cheap_budget(v, cap) if len(v) >= 2 else "–"
        rows.append(f"<tr><td>{html.escape(runner)}</td><td class=\"v\">{cost.target.step_s * 1000:.1f} ms</td>"
                    f"<td class=\"v\">{cost.draft.step_s * 1000:.1f} ms</td><td class=\"v\">{cost.c:.2f}</td>"
                    f"<td class=\"v\">{verify_cost(v, g + 1):.2f}</td><td class=\"v\">{at}</td>"
                    f"<td class=\"v\">{best}</td><td class=\"v\">{budget}</td></tr>")
    said = "".join(f"<p>{reading(r, c)}</p>" for r, c in costs.items())
    return (f'<div class="theory"><table>{head}{"".join(rows)}</table>'
            f'<p class="hint">Measured here for {html.escape(what)}: each model after a 200-token prefix, '
            "one forward over k tokens at a time, medians. Tree budget: the most nodes whose verification "
            f"(nodes + 1 rows) the measured curve keeps within {CHEAP_V:g} plain steps, at most the knob's "
            f"default {cap} (and the measured k).</p>{said}{WHY}</div>")
