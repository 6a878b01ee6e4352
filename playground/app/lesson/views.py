"""The Lesson's results: each step's prediction beside its measurement, as a small table with a
verdict and a figure. Pure functions of the prediction and the experiment's outcome (no Gradio).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from playground.engine.sampling import expected_speedup, expected_tokens_per_call
from playground.app.lesson import steps as lesson
from playground.app.shared import histograms as lab_plots
from playground.app.shared.identity import evidence_html, precision
from playground.app.shared import plots
from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR

HEIGHT = 300  # every figure of the lesson, its empty one included
ALARM = 1e-3  # the lab's threshold for a significant difference


def table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def verdict_span(grade: str) -> str:
    words = {"close": "Close: within 25% of the measurement.", "exact": "Exactly right.",
             "off": "Off: compare with the measurement and the explanation."}
    return f'<p class="{grade}">{words[grade]}</p>'


def panel(rows, grade: str, *notes: str, after: str = "") -> str:
    """The rows, the grade, hint notes, and `after`: HTML of its own (escaped by whoever made it)."""
    extra = "".join(f'<p class="hint">{n}</p>' for n in notes)
    return f'<div class="lesson">{table(rows)}{verdict_span(grade)}{extra}{after}</div>'


def tokens_view(predicted: float, outcome: dict, loaded) -> dict:
    events = outcome["events"]
    per_call = [len(e.emitted) for e in events]
    measured = sum(per_call) / len(per_call)
    grade = lesson.grade(predicted, measured)
    fig = go.Figure(go.Bar(x=list(range(1, len(per_call) + 1)), y=per_call, name="tokens this call",
                           marker_color=SPEC_COLOR))
    guides(fig, predicted, measured)
    finish(fig, "Tokens produced by each target call", "target call", "tokens")
    rows = [("your prediction", f"{predicted:.2f}"), ("measured: tokens per target call", f"{measured:.2f}"),
            ("target calls for the tokens", f"{len(events)} for {sum(per_call)}")]
    note = f"A plain run needs one target call per token: {sum(per_call)} calls here."
    return {"html": panel(rows, grade, note), "figure": fig, "measured": measured, "grade": grade}


def alpha_view(predicted: float, outcome: dict, loaded) -> dict:
    from playground.engine.events import acceptance_by_position, summarize

    events = outcome["events"]
    metrics = summarize(events)
    grade = lesson.grade(predicted, metrics.alpha)
    by_position = acceptance_by_position(events)
    fig = go.Figure(go.Bar(x=[f"guess {i + 1}" for i in range(len(by_position))], y=by_position,
                           name="kept at this position", marker_color=plots.KEEP_COLOR))
    guides(fig, predicted, metrics.alpha)
    finish(fig, "Share of guesses kept, by draft position", "draft position", "share kept")
    tested = sum(e.n_tested for e in events)
    rows = [("your prediction of α", f"{predicted:.2f}"), ("measured α (kept ÷ tested)", f"{metrics.alpha:.2f}"),
            ("guesses tested / kept", f"{tested} / {metrics.accepted}"),
            ("formula: tokens per call at this α, γ = 4", f"{expected_tokens_per_call(metrics.alpha, 4):.2f}")]
    return {"html": panel(rows, grade, "Later positions are kept less often: a guess is only tested when all "
                                       "before it were kept."), "figure": fig, "measured": metrics.alpha, "grade": grade}


def lab_view(predicted: str, outcome: dict, loaded) -> dict:
    from playground.app.shared.render import visible

    result = outcome["lab"]
    fit = result.speculative_vs_p
    found = lesson.SAME if fit.p_value >= ALARM and not fit.impossible else lesson.DIFFERENT
    grade = "exact" if predicted == found else "off"
    label = lambda t: visible(loaded.tokenizer.decode([t], skip_special_tokens=False))
    rows = [("your prediction", html.escape(predicted)), ("the lab found", html.escape(found)),
            ("chi-square p-value", f"{fit.p_value:.3g}"), ("distance to p", f"{fit.total_variation:.3f}"),
            ("target alone: distance to p", f"{result.direct_vs_p.total_variation:.3f}"),
            ("draws from the draft's own guess", f"{result.accepted:,} of {result.draws:,}")]
    note = "Both paths together give p: a kept guess where the draft was right, the residual where it was not."
    tokens, parted = outcome["greedy"]
    rows.append(("greedy, without and with the draft", f"identical, {tokens} tokens" if parted is None
                 else f"they differ from token {parted.position + 1}"))
    after = "" if parted is None else evidence_html(parted, label, precision(loaded.target))
    return {"html": panel(rows, grade, note, after=after), "figure": lab_plots.lab_figure(result, label),
            "measured": found, "grade": grade, "greedy": parted}


def speedup_view(predicted: float, outcome: dict, loaded) -> dict:
    point = outcome["points"][0]
    formula = expected_speedup(point.alpha, point.gamma, point.c)
    v = point.verify_cost or 1.0
    with_v = lesson_formula(point.alpha, point.gamma, point.c, v)
    grade = lesson.grade(predicted, point.speedup)
    fig = go.Figure(go.Bar(x=["your prediction", "measured", "formula with v", "paper's formula (v = 1)"],
                           y=[predicted, point.speedup, with_v, formula],
                           marker_color=[THEORY_COLOR, SPEC_COLOR, BASELINE_COLOR, "#bbbbbb"]))
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), annotation_text="no gain")
    finish(fig, f"Speedup at γ = {point.gamma}", "", "speedup ×")
    rows = [("your prediction", f"{predicted:.2f}×"), ("measured speedup", f"{point.speedup:.2f}×"),
            ("α (acceptance)", f"{point.alpha:.2f}"), ("c (draft ÷ target step)", f"{point.c:.2f}"),
            ("v (verification ÷ target step)", f"{v:.2f}"), ("formula with these α, c, v", f"{with_v:.2f}×")]
    note = "Measured: plain and speculative runs of the same prompt, warm, alternated (the benchmark's code)."
    return {"html": panel(rows, grade, note), "figure": fig, "measured": point.speedup, "grade": grade}


def lesson_formula(alpha: float, gamma: int, c: float, v: float) -> float:
    """The expected speedup (docs/design.md) with the measured verification cost v: the engine's one
    formula, tokens per call ÷ (γc + v)."""
    return expected_speedup(alpha, gamma, c, v)


def gamma_view(predicted: float, outcome: dict, loaded) -> dict:
    points = outcome["points"]
    best = max(points, key=lambda p: p.speedup)
    grade = lesson.grade_gamma(int(predicted), best.gamma)
    fig = go.Figure(go.Scatter(x=[p.gamma for p in points], y=[p.speedup for p in points], mode="lines+markers",
                               name="measured speedup", line=dict(color=SPEC_COLOR)))
    fig.add_vline(x=predicted, line=dict(color=THEORY_COLOR, dash="dash"), annotation_text="your γ")
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"))
    finish(fig, "Measured speedup against γ on this machine", "γ", "speedup ×")
    fig.update_xaxes(type="log", tickvals=list(lesson.GAMMAS))
    rows = [("your γ", f"{int(predicted)}"), ("fastest measured γ", f"{best.gamma} ({best.speedup:.2f}×)")]
    rows += [(f"γ = {p.gamma}", f"{p.speedup:.2f}× (α {p.alpha:.2f}, c {p.c:.2f}, v {p.verify_cost:.2f})")
             for p in points]
    note = "One timed pair of runs per γ: a noisy estimate; the Sweep tab repeats and pools them."
    return {"html": panel(rows, grade, note), "figure": fig, "measured": best.gamma, "grade": grade}


def costs_view(predicted: str, outcome: dict, loaded) -> dict:
    """Step 6: the verdict on v(5) beside the measured c and v(1..5), and what they say."""
    cost = outcome["cost"]
    v, k = cost.target.v, lesson.VERIFY_TOKENS
    found = lesson.verify_verdict(v)
    grade = "exact" if predicted == found else "off"
    ks = list(range(1, len(v) + 1))
    fig = go.Figure(go.Bar(x=[f"k = {x}" for x in ks], y=list(v), name="v(k)",
                           marker_color=[SPEC_COLOR if x == k else BASELINE_COLOR for x in ks]))
    fig.add_hline(y=lesson.VERIFY_LINE, line=dict(color=THEORY_COLOR, dash="dash"),
                  annotation_text=f"{lesson.VERIFY_LINE:g} plain steps", annotation_position="top left")
    finish(fig, f"v(k) through the {cost.runner} runner: one forward over k tokens ÷ one plain step",
           "tokens in one target forward", "plain steps")
    rows = [("your prediction", html.escape(predicted)), (f"measured v({k})", f"{v[k - 1]:.2f} plain steps"),
            ("so verifying 5 tokens costs", html.escape(found)),
            ("c (draft step ÷ target step)", f"{cost.c:.2f}"),
            ("plain steps: target / draft", f"{cost.target.step_s * 1000:.1f} / {cost.draft.step_s * 1000:.1f} ms"),
            ("runner", html.escape(cost.runner))]
    return {"html": panel(rows, grade, costs_reading(cost.c, v)), "figure": fig, "measured": found, "grade": grade}


def costs_reading(c: float, v) -> str:
    """What the measured c and v(k) say about this machine, in a sentence or two."""
    k = lesson.VERIFY_TOKENS
    if v[k - 1] > lesson.VERIFY_LINE:
        verify = ("Verification climbs here: the forward is compute-bound, or its kernel works on blocks of rows, "
                  f"so γ + 1 = {k} rows cost {v[k - 1]:.2f} steps and the best γ stops before the climb.")
    else:
        verify = (f"Verification stays cheap here ({v[k - 1]:.2f} steps for {k} rows): the forward waits on reading "
                  "the weights, once for all rows (memory-bound), as the paper's formula assumes.")
    draft = (f"The draft costs {c:.2f} of a target step: nearly all of it, so its step is set by per-kernel latency "
             "(launch-bound), not by its size." if c >= 0.8 else
             f"The draft costs {c:.2f} of a target step: γ drafts cost γ × {c:.2f} steps.")
    return f"{draft} {verify}"


VIEWS = (tokens_view, alpha_view, lab_view, speedup_view, gamma_view, costs_view)


def guides(fig: go.Figure, predicted: float, measured: float) -> None:
    fig.add_hline(y=predicted, line=dict(color=THEORY_COLOR, dash="dash"), annotation_text="your prediction",
                  annotation_position="top left")
    fig.add_hline(y=measured, line=dict(color=BASELINE_COLOR), annotation_text="measured mean",
                  annotation_position="bottom right")


def finish(fig: go.Figure, title: str, x_title: str, y_title: str) -> None:
    plots.style(fig, HEIGHT, left_titles=False)
    fig.update_layout(title=dict(text=title, font=dict(size=13), x=0.0, xanchor="left"), showlegend=False)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
