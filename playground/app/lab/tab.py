"""The Losslessness lab tab: draw the next token N times by speculative sampling and N times from
the target alone, and compare both with the target's exact p. The statistics are lab.py's
(the same check the tests run); this tab only draws them.

Two buttons read the same fields: a LabForm draws slowly (every draw a whole speculative step), a
FastLabForm fast (p and q once, then the acceptance rule on N fresh guesses).
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr
import plotly.graph_objects as go

from playground.config import RunConfig
from playground.app.shared import controls
from playground.app.shared import histograms as lab_plots
from playground.app.shared import plots
from playground.app.shared.context import AppContext
from playground.app.shared.layout import opening
from playground.app.shared.flow import (Stop, check_prompt, guarded, load_pair, model_job, outputs, parsed,
                                        random_weights_note, read_settings, status_html, whole)
from playground.app.shared.form import Form
from playground.app.shared.lockstep import new_thread, streamed
from playground.app.shared.plots import BASELINE_COLOR, SPEC_COLOR, THEORY_COLOR
from playground.app.shared.render import visible

TITLE = "Losslessness lab"

MAX_DRAWS = 20_000  # a page-level cap: ~1 h on a CPU with the default pair; lab.py allows more
FAST_DRAWS = 20_000
MAX_FAST_DRAWS = 100_000  # lab.MAX_DRAWS: a few seconds in the fast mode
MODES_NOTE = (
    "Fast: p and q are computed once, then the engine's acceptance rule runs on N fresh guesses (seconds). "
    "Slowly: every draw is a whole speculative step, one draft forward and one target pass (minutes)."
)
ALARM = 1e-3  # p-values below this are called a significant difference
DEFAULT_PROMPT = "Name one animal. Answer with a single word."

CSS = """
.lab { font-size: 14px; line-height: 1.45; }
.lab .verdict { font-size: 18px; font-weight: 700; padding: 6px 10px; border-radius: 6px;
  display: inline-block; }
.lab .verdict.ok { background: rgba(34, 160, 70, .16); color: #137333; }
.lab .verdict.alarm { background: rgba(220, 40, 40, .16); color: #b42318; }
.lab table { border-collapse: collapse; margin: 8px 0; font-size: 13px; font-variant-numeric: tabular-nums; }
.lab table { border: none; }
.lab td, .lab th { padding: 3px 8px; border: none; border-bottom: 1px solid var(--border-color-primary);
  text-align: right; }
.lab td:first-child, .lab th:first-child { text-align: left; }
.lab .hint { color: var(--body-text-color-subdued); font-size: 12.5px; }
"""


@dataclass(frozen=True)
class LabForm(Form):
    """What the slow lab reads from the page; field order is the API's parameter order."""

    prompt: str
    pair: str
    draws: int  # N: draws each way
    temperature: float
    top_k: int
    top_p: float
    seed: int

    fast = False
    draws_label, max_draws = "N draws", MAX_DRAWS  # the field as the page names it, and its cap

    def parse(self) -> tuple[int, RunConfig]:
        """(N, the run's settings), checked before anything loads (ValueError names the field)."""
        check_prompt(self.prompt)
        n = whole(self.draws_label, self.draws, 1, self.max_draws)
        if isinstance(self.temperature, (int, float)) and self.temperature == 0:
            raise ValueError("temperature must be above 0 for the lab: at temperature 0 every draw is the "
                             "same token")
        return n, read_settings({"pair": self.pair, "temperature": self.temperature, "top_k": self.top_k,
                                 "top_p": self.top_p, "seed": self.seed, "gamma": 1, "max_new_tokens": 1})


@dataclass(frozen=True)
class FastLabForm(LabForm):
    """The same fields, drawn fast: p and q once, then the acceptance rule on N fresh guesses."""

    fast = True
    draws_label, max_draws = "N fast draws", MAX_FAST_DRAWS


@dataclass(frozen=True)
class LabView:
    """What the lab redraws; field order is the fast lab's API result order."""

    figure: gr.Plot  # the two histograms against the exact p
    convergence: gr.Plot  # the fast lab's distance to p against N
    verdict: gr.HTML
    status: gr.HTML

    def slow(self) -> list:
        """What the slow lab redraws (it has no convergence plot), in its API result order."""
        return [self.figure, self.verdict, self.status]


def build(ctx: AppContext) -> dict:
    inputs, settings = opening(
        "Does speculative sampling really produce the target's own distribution? Draw the **first new "
        "token** many times through the real speculative step (draft, verify, accept or resample) and as "
        "many times straight from the target, then compare both with the target's exact probabilities."
    )
    with inputs:
        prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="lab-prompt")
        with gr.Row():
            fast = gr.Button("Draw fast", variant="primary", scale=3, elem_id="lab-fast")
            run = gr.Button("Draw slowly", variant="secondary", scale=2, elem_id="lab-run")
            stop = gr.Button("Stop", variant="stop", scale=1, elem_id="lab-stop")
        status = gr.HTML(status_html(MODES_NOTE), elem_id="lab-status")
    with settings:
        pair = controls.pair_control(ctx, "lab-pair")
        with gr.Row():
            fast_draws = gr.Number(
                FAST_DRAWS,
                minimum=1,
                maximum=MAX_FAST_DRAWS,
                precision=0,
                label=f"N fast draws (1 to {MAX_FAST_DRAWS})",
                elem_id="lab-fast-draws",
            )
            draws = gr.Number(
                400,
                minimum=1,
                maximum=MAX_DRAWS,
                precision=0,
                label=f"N slow draws (1 to {MAX_DRAWS})",
                elem_id="lab-draws",
            )
        with gr.Row():
            # 0 left out, and 1 to start: at temperature 0 every draw is the same token (nothing to test)
            temperature = controls.control("temperature", 1.0, low_open=True, elem_id="lab-temperature")
            seed = controls.control("seed", elem_id="lab-seed")
        with gr.Row():
            top_k = controls.control("top_k", elem_id="lab-top-k")
            top_p = controls.control("top_p", elem_id="lab-top-p")
    with gr.Row():
        figure = gr.Plot(
            plots.empty_figure("The two histograms appear here."),
            show_label=False,
            elem_id="lab-plot",
            scale=4,
        )
        with gr.Column(scale=2):
            verdict = gr.HTML(intro_html(), css_template=CSS, elem_id="lab-verdict")
    convergence = gr.Plot(
        plots.empty_figure("Draw fast: the distance to p against N appears here.", 220),
        show_label=False,
        elem_id="lab-convergence",
    )
    view = LabView(figure, convergence, verdict, status)
    controls.describe_pair(ctx, pair)
    job = partial(handle, ctx, view)  # one handler, both buttons: the form says which
    slow_form = LabForm(prompt, pair, draws, temperature, top_k, top_p, seed)
    fast_form = FastLabForm(prompt, pair, fast_draws, temperature, top_k, top_p, seed)
    model_job(run, job, slow_form, view.slow(), status, "lab", Stop(stop, "lab_stop"))
    model_job(fast, job, fast_form, outputs(view), status, "lab_fast", Stop(stop, "lab_fast_stop"))
    return {"view": view}


def handle(ctx: AppContext, view: LabView, form: LabForm) -> Iterator[dict]:
    """Draw: check the form, load the pair, then draw slowly or fast, streaming progress; any
    failure is a message in the status box. Stop ends it at the next draw."""
    n, settings = yield from parsed(view.status, form.parse)
    loaded = yield from load_pair(ctx, settings, view.status)
    drawn = fast_drawing if form.fast else drawing
    yield from guarded(view.status, drawn(view, loaded, form, settings, n, ctx.on_models(loaded)), "The lab failed")


def token_label(loaded):
    return lambda t: visible(loaded.tokenizer.decode([t], skip_special_tokens=False))


def drawing(view: LabView, loaded, form: LabForm, settings: RunConfig, n: int, start=new_thread):
    """Run lab.losslessness_lab in lockstep, streaming progress, then draw its LabResult."""
    from playground.engine import factory
    from playground.measure.teach.lab import losslessness_lab
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, form.prompt)
    config = factory.spec_config(settings)

    def work(report):
        def each_draw(done: int, total: int) -> None:
            report(done, total, final=done == total)

        return losslessness_lab(
            loaded.target.model, factory.model_drafter(settings, factory.Models.of(loaded)), ids, config, n, each_draw
        )

    def show(done: int, total: int) -> dict:
        form.progress((done, total), desc="drawing")
        return {view.status: status_html(f"Drawing: {done} of {total}", done / total)}

    result = yield from streamed(work, show, every=0.25, start=start)
    note = random_weights_note(loaded, "the statistics are real")
    yield {
        view.figure: lab_plots.lab_figure(result, token_label(loaded)),
        view.verdict: verdict_html(result),
        view.status: status_html(f"Done: {result.draws} draws each way.{note}"),
    }


def verdict_html(result) -> str:
    """The verdict in words first, then the figures behind it."""
    fit, control, pair = result.speculative_vs_p, result.direct_vs_p, result.speculative_vs_direct
    n = result.draws
    if fit.impossible:
        head = (
            f"Significant difference: {fit.impossible} speculative draws landed on tokens the target gives "
            "probability 0. The engine is broken."
        )
        ok = False
    elif fit.p_value < ALARM:
        head = f"Significant difference at {n} draws (p = {fit.p_value:.1e}): the engine is broken."
        ok = False
    else:
        head = f"No detectable difference at {n} draws (p = {fit.p_value:.2f})."
        ok = True
    rows = [
        ("speculative vs exact p", fit.total_variation, fit.p_value),
        ("target alone vs exact p (the noise of N draws)", control.total_variation, control.p_value),
        ("speculative vs target alone", pair.total_variation, pair.p_value),
    ]
    table = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{tv:.3f}</td><td>{p:.3g}</td></tr>" for k, tv, p in rows
    )
    kept = result.accepted
    return (
        f'<div class="lab"><span class="verdict {"ok" if ok else "alarm"}">{html.escape(head)}</span>'
        f"<table><tr><th></th><th>distance</th><th>p-value</th></tr>{table}</table>"
        f"<p>The draft's own guess was kept in <b>{kept}</b> of {n} draws; "
        f"the other {n - kept} came from the "
        "residual. Only both paths together give p.</p>"
        '<p class="hint">Distance: total variation, half the summed gap between two distributions (0 = same, '
        "1 = disjoint); with N draws even exact sampling shows some (second row). "
        "p-value: the chance of a gap "
        f"at least this large if the draws really follow p (chi-square test); below {ALARM:g} we call it a "
        "significant difference. More draws find smaller differences.</p></div>"
    )


def intro_html() -> str:
    return (
        '<div class="lab"><p>Speculative sampling keeps a guess with probability min(1, p/q) and otherwise '
        "resamples from norm(max(0, p − q)). If that is implemented right, "
        "the first token's histogram matches "
        "the target's exact p (the diamonds), just like drawing from the target itself.</p></div>"
    )


# -- fast mode ---------------------------------------------------------------------------------------

def fast_drawing(view: LabView, loaded, form: LabForm, settings: RunConfig, n: int, start=new_thread):
    """Run lab.fast_lab in lockstep; every checkpoint redraws all four outputs."""
    from playground.engine import factory
    from playground.measure.teach.lab import fast_lab
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, form.prompt)
    note = random_weights_note(loaded, "the statistics are real")
    config = factory.spec_config(settings)
    label = token_label(loaded)
    history: list[tuple[int, float, float]] = []  # (N, speculative distance, direct distance)

    def work(report):
        return fast_lab(loaded.target.model, factory.model_drafter(settings, factory.Models.of(loaded)), ids, config, n, report)

    def show(result) -> dict:
        history.append((result.draws, result.speculative_vs_p.total_variation, result.direct_vs_p.total_variation))
        finished = result.draws == n
        message = f"Done: {n} draws each way (p and q computed once).{note}" if finished else f"Drawing: {result.draws} of {n}"
        return {
            view.figure: lab_plots.lab_figure(result, label),
            view.convergence: convergence_figure(history),
            view.verdict: verdict_html(result),
            view.status: status_html(message, None if finished else result.draws / n),
        }

    yield from streamed(work, show, start=start)


def convergence_figure(history: list[tuple[int, float, float]]) -> go.Figure:
    """Distance to p against N on log-log axes, beside a 1/√N guide through the first point."""
    ns = [h[0] for h in history]
    fig = go.Figure()
    for i, name, color in ((1, "speculative vs p", SPEC_COLOR),
                           (2, "target alone vs p", BASELINE_COLOR)):
        fig.add_trace(go.Scatter(x=ns, y=[h[i] for h in history], mode="lines+markers", name=name,
                                 line=dict(color=color), hovertemplate="N = %{x}: %{y:.4f}<extra>" + name + "</extra>"))
    if history:
        start = history[0][2] or history[0][1]
        fig.add_trace(go.Scatter(x=ns, y=[start * (ns[0] / k) ** 0.5 for k in ns], mode="lines",
                                 name="∝ 1/√N", line=dict(color=THEORY_COLOR, dash="dash")))
    plots.style(fig, height=260, left_titles=False)
    fig.update_layout(title=dict(text="Distance to p (total variation) shrinks like 1/√N",
                                 font=dict(size=13), x=0.0, xanchor="left"))
    fig.update_xaxes(type="log", title_text="N draws")
    fig.update_yaxes(type="log", title_text="distance", rangemode="normal")
    return fig
