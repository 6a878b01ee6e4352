"""The p/q explorer tab: set a target p and a draft q over six tokens and see what one
verification does with them; no model, instant. The numbers are explorer.py's (the engine's
sampling functions); this tab lays them out, with a note in words beside each quantity.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from playground.config import KNOBS
from playground.measure.teach import explorer
from playground.measure.teach.stats import goodness_of_fit
from playground.app.shared import controls
from playground.app.shared.flow import model_job, outputs, parsed, status_html, whole
from playground.app.shared.form import Form
from playground.app.shared.plots import (
    DROP_COLOR,
    KEEP_COLOR,
    P_COLOR,
    Q_COLOR,
    RESIDUAL_COLOR,
    THEORY_COLOR,
    empty_figure,
    style,
)

TITLE = "p/q explorer"
TOKENS = explorer.TOKENS
DEFAULT_PRESET = "draft over-confident"
DEFAULT_DRAWS = 10_000
ALARM = 1e-3  # as in the lab: a p-value below this is called a significant difference
HEIGHT = 260

CSS = """
.explorer { font-size: 14px; line-height: 1.45; }
.explorer b.num { font-variant-numeric: tabular-nums; }
.explorer .hint { color: var(--body-text-color-subdued); font-size: 12.5px; }
"""


@dataclass(frozen=True)
class SampleForm(Form):
    """What Sample reads from the page; field order is the API's parameter order (p0..p5, q0..q5,
    draws, seed)."""

    p: dict  # "p0".."p5": the target's weight of each token (the row is normalised)
    q: dict  # "q0".."q5": the draft's
    draws: int  # N
    seed: int

    def parse(self) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(p, q, N, seed), checked before anything is drawn (ValueError names the field)."""
        seeds = KNOBS["seed"]
        return (explorer.distribution("p", list(self.p.values())), explorer.distribution("q", list(self.q.values())),
                whole("N draws", self.draws, 1, explorer.MAX_DRAWS), whole("seed", self.seed, seeds.low, seeds.high))


@dataclass(frozen=True)
class SampleView:
    """What Sample redraws; field order is the API's result order."""

    plot: gr.Plot  # the histogram of the draws against p
    note: gr.HTML  # the verdict in words
    status: gr.HTML


def build(ctx) -> dict:  # ctx unused: the explorer needs no model
    gr.Markdown(
        "Set the **target's p** and the **draft's q** over six tokens and watch one verification: the draft "
        "proposes a token from q, the target keeps it with probability min(1, p/q), and after a rejection "
        "resamples from the residual norm(max(0, p − q)). Sliders are weights; each row is normalised."
    )
    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            preset = gr.Radio(list(explorer.PRESETS), value=DEFAULT_PRESET, label="Preset", elem_id="ex-preset")
            lesson = gr.Markdown(explorer.PRESETS[DEFAULT_PRESET].lesson, elem_id="ex-lesson")
            p_sliders, q_sliders = [], []
            start = explorer.PRESETS[DEFAULT_PRESET]
            for i, token in enumerate(TOKENS):
                with gr.Row():
                    p_sliders.append(weight(f"p({token})", start.p[i], f"ex-p-{i}"))
                    q_sliders.append(weight(f"q({token})", start.q[i], f"ex-q-{i}"))
            with gr.Row():
                draws = gr.Number(DEFAULT_DRAWS, minimum=1, maximum=explorer.MAX_DRAWS, precision=0,
                                  label=f"N draws (1 to {explorer.MAX_DRAWS:,})", elem_id="ex-draws")
                seed = controls.control("seed", elem_id="ex-sample-seed")  # ex-seed is the Export tab's
            sample = gr.Button(f"Sample {DEFAULT_DRAWS:,}", variant="primary", elem_id="ex-sample")
            status = gr.HTML(status_html("Runs the engine's speculative_verify with γ = 1, once per draw."),
                             elem_id="ex-status")
        with gr.Column(scale=5):
            first, views = views_for(start.p, start.q), []
            for i, name in enumerate(("overlap", "accept", "residual", "sample")):
                with gr.Row():
                    views.append(gr.Plot(first[2 * i], show_label=False, elem_id=f"ex-{name}-plot", scale=3))
                    views.append(gr.HTML(first[2 * i + 1], css_template=CSS, elem_id=f"ex-{name}-note", scale=2))
    weights = p_sliders + q_sliders
    preset.change(choose_preset, preset, [lesson, *weights, *views], api_name="explorer_preset")
    gr.on([s.input for s in weights], redraw, weights, views, trigger_mode="always_last",
          api_name="explorer_redraw")
    draws.change(lambda n: gr.update(value=sample_label(n)), draws, sample, api_visibility="private")
    view = SampleView(views[-2], views[-1], status)
    form = SampleForm(p={f"p{i}": s for i, s in enumerate(p_sliders)}, q={f"q{i}": s for i, s in enumerate(q_sliders)},
                      draws=draws, seed=seed)
    model_job(sample, partial(handle_sample, view), form, outputs(view), status, "explorer_sample")
    return {"view": view}


def weight(label: str, value: float, elem_id: str) -> gr.Slider:
    return gr.Slider(0, 1, value=value, step=0.01, label=label, elem_id=elem_id, min_width=140)


def sample_label(n) -> str:
    try:
        return f"Sample {whole('N draws', n, 1, explorer.MAX_DRAWS):,}"
    except ValueError:
        return "Sample"


# -- handlers ------------------------------------------------------------------------------------


def choose_preset(name: str) -> tuple:
    if name not in explorer.PRESETS:
        raise gr.Error(f"preset must be one of {list(explorer.PRESETS)}, got {name!r}")
    preset = explorer.PRESETS[name]
    return (preset.lesson, *preset.p, *preset.q, *views_for(preset.p, preset.q))


def redraw(*weights: float) -> tuple:
    n = len(TOKENS)
    try:
        return views_for(weights[:n], weights[n:])
    except ValueError as e:
        raise gr.Error(str(e), print_exception=False) from None


def views_for(p_weights, q_weights) -> tuple:
    """Figures and notes for every quantity; the sample view is cleared (p or q changed)."""
    v = explorer.verification(explorer.distribution("p", p_weights), explorer.distribution("q", q_weights))
    cleared = empty_figure("Press Sample to draw tokens through the real verification.", HEIGHT)
    return (
        overlap_figure(v), overlap_note(v),
        accept_figure(v), accept_note(v),
        residual_figure(v), residual_note(v),
        cleared, sample_intro(),
    )


def handle_sample(view: SampleView, form: SampleForm) -> Iterator[dict]:
    """Draw through speculative_verify, redrawing the histogram every 500 draws (it queues with the
    model jobs: a few seconds of CPU, so no race is timed meanwhile)."""
    p, q, draws, seed = yield from parsed(view.status, form.parse)
    for counts, kept in explorer.stream_real(p, q, draws, seed, every=max(500, draws // 20)):
        done = int(counts.sum())
        fit = goodness_of_fit(counts, p)
        yield {
            view.plot: sample_figure(p, counts),
            view.note: sample_note(p, fit, kept),
            view.status: status_html(f"Drawn {done:,} of {draws:,}" if done < draws else f"Done: {draws:,} draws.",
                                     done / draws if done < draws else None),
        }


# -- figures -------------------------------------------------------------------------------------


def bars(fig: go.Figure, y, name: str, color: str, **kwargs) -> None:
    fig.add_trace(go.Bar(x=list(TOKENS), y=list(y), name=name, marker_color=color,
                         hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>", **kwargs))


def diamonds(fig: go.Figure, y, name: str = "p") -> None:
    fig.add_trace(go.Scatter(x=list(TOKENS), y=list(y), mode="markers", name=name,
                             marker=dict(symbol="diamond", size=12, color=THEORY_COLOR,
                                         line=dict(color="white", width=1)),
                             hovertemplate="%{x}: p = %{y:.3f}<extra></extra>"))


def finish(fig: go.Figure, title: str, y_title: str, **layout) -> go.Figure:
    style(fig, HEIGHT, left_titles=False)
    fig.update_layout(title=dict(text=title, font=dict(size=13), x=0.0, xanchor="left"), **layout)
    fig.update_yaxes(title_text=y_title)
    return fig


def overlap_figure(v: explorer.Verification) -> go.Figure:
    fig = go.Figure()
    bars(fig, v.q, "q (draft)", Q_COLOR)
    bars(fig, v.p, "p (target)", P_COLOR)
    bars(fig, v.overlap, "min(p, q)", KEEP_COLOR)
    return finish(fig, f"p, q and their overlap: α = Σ min(p, q) = {v.alpha:.2f}", "probability")


def accept_figure(v: explorer.Verification) -> go.Figure:
    fig = go.Figure()
    bars(fig, np.nan_to_num(v.accept, nan=0.0), "min(1, p/q)", KEEP_COLOR,
         text=["never drafted" if np.isnan(a) else f"{a:.2f}" for a in v.accept], textposition="outside")
    bars(fig, v.rejected, "drafted and rejected: max(0, q − p)", DROP_COLOR)
    return finish(fig, "Acceptance of each guess, and where rejections come from", "probability",
                  yaxis=dict(range=[0, 1.15]))


def residual_figure(v: explorer.Verification) -> go.Figure:
    fig = go.Figure()
    bars(fig, v.overlap, "kept guess: min(p, q)", KEEP_COLOR)
    bars(fig, v.resampled, "resampled: (1 − α) × residual", RESIDUAL_COLOR)
    diamonds(fig, v.p)
    fig = finish(fig, "What comes out: kept guesses + resamples, stacked", "probability")
    fig.update_layout(barmode="stack")
    return fig


def sample_figure(p: np.ndarray, counts: np.ndarray) -> go.Figure:
    fig = go.Figure()
    n = max(counts.sum(), 1)
    bars(fig, counts / n, "share of draws", P_COLOR, opacity=0.8)
    diamonds(fig, p)
    return finish(fig, f"{int(counts.sum()):,} tokens drawn through speculative_verify, against p", "share")


# -- notes in words ------------------------------------------------------------------------------


def note(*paragraphs: str) -> str:
    return '<div class="explorer">' + "".join(f"<p>{p}</p>" for p in paragraphs) + "</div>"


def num(x: float) -> str:
    return f'<b class="num">{x:.2f}</b>'


def overlap_note(v: explorer.Verification) -> str:
    best = TOKENS[int(np.argmax(v.q))]
    return note(
        f"The draft proposes a token with probability q; the guess survives with probability min(p, q). "
        f"Summed over tokens that is <b>α = {v.alpha:.2f}</b>: the share of guesses the target keeps.",
        f"The draft's favourite is “{html.escape(best)}” (q = {num(v.q[TOKENS.index(best)])}). "
        '<span class="hint">α = 1 when q = p; α = 0 when they share no token.</span>',
    )


def accept_note(v: explorer.Verification) -> str:
    worst = int(np.nanargmin(np.where(v.q > 0, v.accept, np.nan))) if (v.q > 0).any() else 0
    never = [TOKENS[i] for i in np.flatnonzero(v.q == 0)]
    missing = (f" The draft never proposes {', '.join(never)}: no acceptance to compute." if never else "")
    return note(
        "A guess x is kept with probability min(1, p(x)/q(x)): surely when the target likes it at least as "
        "much as the draft, less often when the draft over-rates it.",
        f"Hardest to keep: “{TOKENS[worst]}” at {num(v.accept[worst])}.{missing} "
        f"Rejections happen {num(1 - v.alpha)} of the time, all from tokens where q > p (red).",
    )


def residual_note(v: explorer.Verification) -> str:
    gets = [f"{TOKENS[i]} {v.residual[i]:.2f}" for i in np.flatnonzero(v.residual > 1e-12)]
    used = "never used (nothing is rejected)" if v.alpha >= 1 - 1e-12 else ", ".join(gets)
    return note(
        "After a rejection the target draws from the residual norm(max(0, p − q)): only the tokens the draft "
        f"under-rates. Residual here: {html.escape(used)}.",
        "Kept guesses (green) plus resamples (orange) stack up to exactly p (diamonds): the output follows "
        "the target, whatever the draft does. A better draft only changes how often the guess is kept.",
    )


def sample_intro() -> str:
    return note("Sampling draws a guess from q and runs the engine's own <code>speculative_verify</code> "
                "(γ = 1) on it, N times. The histogram should sit on the diamonds, up to sampling noise.")


def sample_note(p: np.ndarray, fit, kept: int) -> str:
    n = fit.draws
    floor = explorer.expected_distance(p, n)
    verdict = ("<b>No detectable difference from p</b>" if fit.p_value >= ALARM and not fit.impossible
               else "<b>Significant difference from p: the rule is broken</b>")
    return note(
        f"{verdict} after {n:,} draws (chi-square p-value {fit.p_value:.2f}).",
        f"Distance to p: {fit.total_variation:.3f}; exact sampling shows about {floor:.3f} at this N "
        "(it shrinks like 1/√N). "
        f"The draft's guess was kept {kept:,} times ({kept / max(n, 1):.0%}); the rest came from the residual.",
    )
