"""The Theory tab: the expected speedup against γ from this session's measured α and c, with the
measured points on top, the recommended γ, and a button to measure α and c now; below, c and v(k)
of the pair through each runner chosen, side by side, with the formula's speedup per runner.

Points come from ctx.measurements (this session's runs: the sweep, this tab's button, and the
race once it records its runs there), filtered to the pair, drafter, draft model and temperature chosen here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr

from playground.config import KNOBS, RunConfig
from playground.app.shared import controls
from playground.app.theory import explain as theory
from playground.app.theory import plots as theory_plots
from playground.app.theory import runner_section
from playground.app.shared.context import AppContext
from playground.app.shared.flow import (Stop, check_prompt, guarded, load_pair, model_job, outputs, parsed,
                                        read_settings, status_html, whole)
from playground.app.shared.form import Form
from playground.app.shared.lockstep import streamed
from playground.app.shared.sessions import session_of
from playground.measure.teach.theory import measure_point, pooled_for

TITLE = "Theory vs measurement"

# A measurement here is a warm-up and two or three timed runs while the page waits: a page-level cap on
# the run's length (within the max_new_tokens knob's range) keeps it to seconds on a CPU.
MAX_MEASURE_TOKENS = min(256, KNOBS["max_new_tokens"].high)
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


@dataclass(frozen=True)
class MeasureForm(Form):
    """What "Measure α and c now" reads from the page; field order is the API's parameter order."""

    prompt: str
    pair: str
    drafter: str
    temperature: float
    gamma: int
    tokens: int  # new tokens per timed run, capped by the page (MAX_MEASURE_TOKENS)
    draft: str = ""  # a models.yaml name drafting instead of the pair's own ("": the pair's)

    def parse(self) -> RunConfig:
        """The run's settings, checked before anything loads (ValueError names the field)."""
        check_prompt(self.prompt)
        tokens = whole("new tokens per run", self.tokens, 1, MAX_MEASURE_TOKENS)
        return read_settings({"pair": self.pair, "drafter": self.drafter, "temperature": self.temperature,
                              "gamma": self.gamma, "max_new_tokens": tokens, "draft": self.draft or ""})


@dataclass(frozen=True)
class TheoryView:
    """What the tab redraws; field order is the API's result order."""

    plot: gr.Plot  # the formula's curve and the measured points
    explain: gr.HTML  # the recommended γ, α, c and v in words
    table: gr.Dataframe  # this session's measured points
    tree: gr.Plot  # a chain's length against a tree's
    status: gr.HTML


def build(ctx: AppContext) -> dict:
    spec = ctx.registry.pair(ctx.default_pair)
    gr.Markdown(
        "How much should speculation help, and at which γ? The curve is the paper's formula fed with **α** "
        "and **c** measured here on this machine; the dots are speedups actually measured in this session."
    )
    with gr.Row():
        with gr.Column(scale=3):
            plot = gr.Plot(theory_plots.theory_figure([], None, None), show_label=False, elem_id="th-plot")
        with gr.Column(scale=2):
            explain = gr.HTML(
                theory.explain_html([], None, spec.name), css_template=theory.CSS, elem_id="th-explain"
            )
    with gr.Row():
        pair = controls.pair_control(ctx, "th-pair")
        drafter = controls.control("drafter", elem_id="th-drafter")
        draft = gr.Dropdown(ctx.draft_choices(), value="", label=KNOBS["draft"].label, info=KNOBS["draft"].help,
                            elem_id="th-draft")
        temperature = controls.control("temperature", spec.temperature, elem_id="th-temperature")
    with gr.Row():
        prompt = gr.Textbox(
            DEFAULT_PROMPT, label="Prompt to measure on", lines=2, scale=3, elem_id="th-prompt"
        )
        with gr.Column(scale=2):
            gamma = controls.control("gamma", spec.gamma, elem_id="th-gamma")
            tokens = gr.Slider(
                8,
                MAX_MEASURE_TOKENS,
                value=48,
                step=8,
                precision=0,
                label="New tokens per run",
                elem_id="th-tokens",
            )
    with gr.Row():
        measure = gr.Button("Measure α and c now", variant="primary", scale=3, elem_id="th-measure")
        stop = gr.Button("Stop", variant="stop", scale=1, elem_id="th-stop")
        clear = gr.Button("Forget my points", scale=1, elem_id="th-clear")
    status = gr.HTML(
        status_html(
            "Measuring takes one warm-up and one timed run each way (autoregressive and speculative; with "
            "the draft model also a token tree from the same draft, drawn below against the chain)."
        ),
        elem_id="th-status",
    )
    table = gr.Dataframe(
        headers=theory.POINT_COLUMNS,
        value=[],
        label="Measured points (this session)",
        interactive=False,
        elem_id="th-points",
    )
    tree_plot = gr.Plot(theory_plots.tree_length_figure([], None), show_label=False, elem_id="th-tree")
    runner_view, runners, runners_button = runner_section.build(ctx, spec.name)

    chosen = [pair, drafter, temperature, draft]
    view = TheoryView(plot, explain, table, tree_plot, status)
    figures = [view.plot, view.explain, view.table, view.tree]  # what a redraw changes (not the status)
    redraw = redraw_handler(ctx, view)
    controls.describe_pair(ctx, pair)
    for control in chosen:
        control.change(redraw, chosen, figures, queue=False, api_visibility="private")
    runner_section.wire(ctx, runner_view, runners, runners_button, chosen, gamma)
    form = MeasureForm(prompt, pair, drafter, temperature, gamma, tokens, draft)
    model_job(measure, partial(handle, ctx, view), form, outputs(view), status, "measure",
              Stop(stop, "measure_stop"))
    clear.click(clear_handler(ctx, view), chosen, figures, queue=False, api_visibility="private")
    tab = gr.context.Context.block  # the enclosing gr.Tab: redraw when it is opened (points may be new)
    if isinstance(tab, gr.Tab):
        tab.select(redraw, chosen, figures, queue=False, api_visibility="private")
        tab.select(runner_section.redraw_handler(ctx, runner_view), runner_section.inputs(chosen, gamma),
                   runner_section.figures(runner_view), queue=False, api_visibility="private")
    return {"view": view, "runners": runner_view}


def draw(ctx: AppContext, view: TheoryView, session, pair: str, drafter: str, temperature: float,
         draft: str = "") -> dict:
    """Figure, explanation and table from this session's points of the chosen pair, drafter, draft model,
    T, and the pair's target's measured v(k) when this app run has measured it (ctx.costs)."""
    points, pooled = pooled_for(ctx.measurements.get(session), pair, drafter, temperature, draft)
    what = f"{pair}{f' drafted by {draft}' if draft else ''}, {drafter}, temperature {float(temperature):g}"
    curve = ctx.costs.target_curve(ctx.registry.pair(pair).target) if pair in ctx.registry.pairs else None
    return {
        view.plot: theory_plots.theory_figure(points, pooled, theory.recommended(pooled, curve), curve),
        view.explain: theory.explain_html(points, pooled, what, curve),
        view.table: theory.points_table(points),
        view.tree: theory_plots.tree_length_figure(points, pooled),
    }


def redraw_handler(ctx: AppContext, view: TheoryView):
    def redraw(pair: str, drafter: str, temperature: float, draft: str = "", request: gr.Request = None) -> dict:
        return draw(ctx, view, session_of(request), pair, drafter, temperature, draft)

    return redraw


def clear_handler(ctx: AppContext, view: TheoryView):
    def clear(pair: str, drafter: str, temperature: float, draft: str = "", request: gr.Request = None) -> dict:
        ctx.measurements.clear(session_of(request))
        return draw(ctx, view, session_of(request), pair, drafter, temperature, draft)

    return clear


def handle(ctx: AppContext, view: TheoryView, form: MeasureForm) -> Iterator[dict]:
    """Measure one point now: check the form, load the pair, then a warm-up and the baseline and
    speculative runs alternated (the bench's code), and the target's v(k) once per app run."""
    settings = yield from parsed(view.status, form.parse)
    loaded = yield from load_pair(ctx, settings, view.status)
    point = yield from guarded(view.status, measuring(ctx, view, loaded, form, settings),
                               "Measurement failed")
    ctx.measurements.add(form.session, point)
    done = (
        f"Measured at γ = {point.gamma}: speedup {point.speedup:.2f}×, α = {point.alpha:.2f}, "
        f"c = {point.c:.2f}, verification cost {point.verify_cost:.2f}×."
    )
    yield {**draw(ctx, view, form.session, settings.pair, settings.drafter, settings.temperature, settings.draft),
           view.status: status_html(done)}


def measuring(ctx: AppContext, view: TheoryView, loaded, form: MeasureForm, settings: RunConfig):
    """One point measured in lockstep, then the target's v(k) into ctx.costs (measured once per app
    run), its progress in the status box; returns the point."""
    from playground.measure.bench.machine import spare_a_core
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, form.prompt)

    def work(report):
        point = measure_point(loaded, ids, settings, 1, report, "measure", short(form.prompt))
        with spare_a_core():  # the same threads as the runs it is set beside
            ctx.costs.measure(loaded.target, settings.runner, runner_section.VERIFY_K, 3)
        report(3, 3, "v(k) of the target")
        return point

    def show(done: int, total: int, what: str) -> dict:
        form.progress((done, total), desc=f"ran {what}")
        return {view.status: status_html(f"Measuring: ran {what} ({done}/{total})", done / total)}

    return (yield from streamed(work, show, start=ctx.on_models(loaded)))


def short(prompt: str, n: int = 40) -> str:
    text = " ".join(prompt.split())
    return text if len(text) <= n else text[: n - 1] + "…"

