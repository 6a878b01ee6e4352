"""The Theory tab: the expected speedup against γ from this session's measured α and c, with the
measured points on top, the recommended γ, and a button to measure α and c now; below, c and v(k)
of the pair through each runner chosen, side by side, with the formula's speedup per runner.

Points come from ctx.measurements (this session's runs: the sweep, this tab's button, and the
race once it records its runs there), filtered to the pair, drafter and temperature chosen here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from playground.config import KNOBS
from playground.app.shared import controls
from playground.app.theory import explain as theory
from playground.app.theory import plots as theory_plots
from playground.app.theory import runner_section
from playground.app.shared.context import AppContext
from playground.app.shared.flow import (check_prompt, fail, guarded, load_pair, model_job, outputs, read_settings,
                                        status_html, whole)
from playground.app.shared.lockstep import streamed
from playground.app.shared.sessions import session_of
from playground.measure.teach.theory import measure_point, pooled_for

TITLE = "Theory vs measurement"
log = logging.getLogger(__name__)

# A measurement here is a warm-up and two or three timed runs while the page waits: a page-level cap on
# the run's length (within the max_new_tokens knob's range) keeps it to seconds on a CPU.
MAX_MEASURE_TOKENS = min(256, KNOBS["max_new_tokens"].high)
VERIFY_K = 9  # v(k) measured for k = 1..9 tokens: γ up to 8
DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number."




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
    curves = None  # v(k) of the targets: the app's RunnerCosts (ctx.costs), shared with the race and lesson
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

    chosen = [pair, drafter, temperature]
    view = TheoryView(plot, explain, table, tree_plot, status)
    figures = [view.plot, view.explain, view.table, view.tree]  # what a redraw changes (not the status)
    redraw = redraw_handler(ctx, view, curves)
    controls.describe_pair(ctx, pair)
    for control in chosen:
        control.change(redraw, chosen, figures, queue=False, api_visibility="private")
    runner_section.wire(ctx, runner_view, runners, runners_button, chosen, gamma)
    model_job(measure, measure_handler(ctx, view, curves), [prompt, *chosen, gamma, tokens], outputs(view), status,
              "measure", stop=stop, stop_api="measure_stop")
    clear.click(clear_handler(ctx, view, curves), chosen, figures, queue=False, api_visibility="private")
    tab = gr.context.Context.block  # the enclosing gr.Tab: redraw when it is opened (points may be new)
    if isinstance(tab, gr.Tab):
        tab.select(redraw, chosen, figures, queue=False, api_visibility="private")
        tab.select(runner_section.redraw_handler(ctx, runner_view), [pair, temperature, gamma],
                   runner_section.figures(runner_view), queue=False, api_visibility="private")
    return {"view": view, "runners": runner_view}


def draw(ctx: AppContext, view: TheoryView, session, pair: str, drafter: str, temperature: float,
         curves=None) -> dict:
    """Figure, explanation and table from this session's points of the chosen pair, drafter, T,
    and the pair's target's measured v(k) when this app has measured it."""
    points, pooled = pooled_for(ctx.measurements.get(session), pair, drafter, temperature)
    what = f"{pair}, {drafter}, temperature {float(temperature):g}"
    curve = target_curve(ctx, curves, pair)
    return {
        view.plot: theory_plots.theory_figure(points, pooled, theory.recommended(pooled, curve), curve),
        view.explain: theory.explain_html(points, pooled, what, curve),
        view.table: theory.points_table(points),
        view.tree: theory_plots.tree_length_figure(points, pooled),
    }


def target_curve(ctx: AppContext, curves, pair: str):
    """The pair's target's v(k): from `curves` when given, else the one this app run measured last."""
    if pair not in ctx.registry.pairs:
        return None
    target = ctx.registry.pair(pair).target
    return ctx.costs.target_curve(target) if curves is None else curves.for_model(target)


def redraw_handler(ctx: AppContext, view: TheoryView, curves=None):
    def redraw(pair: str, drafter: str, temperature: float, request: gr.Request = None) -> dict:
        return draw(ctx, view, session_of(request), pair, drafter, temperature, curves)

    return redraw


def clear_handler(ctx: AppContext, view: TheoryView, curves=None):
    def clear(pair: str, drafter: str, temperature: float, request: gr.Request = None) -> dict:
        ctx.measurements.clear(session_of(request))
        return draw(ctx, view, session_of(request), pair, drafter, temperature, curves)

    return clear


def measure_handler(ctx: AppContext, view: TheoryView, curves=None):
    """Measure one point now: warm-up, then baseline and speculative runs alternated (the bench's code)."""

    def measure(
        prompt: str,
        pair: str,
        drafter: str,
        temperature: float,
        gamma: int,
        tokens: int,
        request: gr.Request = None,
        progress=gr.Progress(),
    ) -> Iterator[dict]:
        try:
            check_prompt(prompt)
            tokens = whole("new tokens per run", tokens, 1, MAX_MEASURE_TOKENS)
            settings = read_settings(
                {
                    "pair": pair,
                    "drafter": drafter,
                    "temperature": temperature,
                    "gamma": gamma,
                    "max_new_tokens": tokens,
                }
            )
        except ValueError as e:
            yield from fail(view.status, str(e))
        loaded = yield from load_pair(ctx, settings, view.status)
        curve_of = (lambda m: ctx.costs.measure(m, settings.runner, VERIFY_K, 3)) if curves is None else \
            (lambda m: curves.measure(m, max_k=VERIFY_K, repeats=3))
        point = yield from guarded(view.status, measuring(view, loaded, prompt, settings, curve_of, progress),
                                   "Measurement failed")
        session = session_of(request)
        ctx.measurements.add(session, point)
        done = (
            f"Measured at γ = {point.gamma}: speedup {point.speedup:.2f}×, α = {point.alpha:.2f}, "
            f"c = {point.c:.2f}, verification cost {point.verify_cost:.2f}×."
        )
        yield {**draw(ctx, view, session, settings.pair, settings.drafter, settings.temperature, curves),
               view.status: status_html(done)}

    return measure


def measuring(view: TheoryView, loaded, prompt: str, settings, curve_of, progress):
    """One point measured in lockstep (and the target's v(k) by curve_of, once per app run), its
    progress in the status box; returns the point."""
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, prompt)

    def work(report):
        point = measure_point(loaded, ids, settings, 1, report, "measure", short(prompt))
        if curve_of is not None:  # v(k) of this target, once per app run (a few seconds)
            from playground.measure.bench.machine import spare_a_core

            with spare_a_core():  # the same threads as the runs it is set beside
                curve_of(loaded.target)
            report(3, 3, "v(k) of the target")
        return point

    def show(done: int, total: int, what: str) -> dict:
        progress((done, total), desc=f"ran {what}")
        return {view.status: status_html(f"Measuring: ran {what} ({done}/{total})", done / total)}

    return (yield from streamed(work, show))


def short(prompt: str, n: int = 40) -> str:
    text = " ".join(prompt.split())
    return text if len(text) <= n else text[: n - 1] + "…"

