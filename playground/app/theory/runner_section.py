"""The Theory tab's runner section: c and v(k) of the chosen pair (and draft model) through each runner chosen,
measured on this machine (a few forwards of each model, cached per pair and runner for the app run
in ctx.costs, which the Lesson and the race's tree forecast read too), drawn side by side with the
formula's speedup per runner at this session's α.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr

from playground.config import KNOBS, MODEL, RUNNERS, RunConfig
from playground.app.theory import explain as theory
from playground.app.theory import runners as runner_views
from playground.app.shared.context import AppContext
from playground.app.shared.flow import (guarded, load_pair, model_job, outputs, parsed, read_settings,
                                        status_html)
from playground.app.shared.form import Form
from playground.app.shared.lockstep import streamed
from playground.app.shared.sessions import session_of
from playground.measure.teach.theory import pooled_for

RUNNER_CHOICES = tuple(r for r in RUNNERS if r != "auto")  # what a learner may measure, each by name
VERIFY_K = 9  # v(k) for k = 1..9 tokens, as the tab's own curve: γ up to 8


@dataclass(frozen=True)
class RunnersForm(Form):
    """What "Measure c and v(k) per runner" reads from the page; field order is the API's."""

    pair: str
    runners: list  # the runners to measure, by name
    temperature: float
    gamma: int
    draft: str = ""  # the tab's draft model ("": the pair's own)

    def parse(self) -> tuple[list[str], RunConfig]:
        """(the chosen runners, the run's settings), checked before anything loads."""
        return check_runners(self.runners), read_settings({"pair": self.pair, "temperature": self.temperature,
                                                           "gamma": self.gamma, "draft": self.draft or ""})


@dataclass(frozen=True)
class RunnerView:
    """The runner section: what its measurement redraws, in the API's result order."""

    v: gr.Plot  # v(k) of the target per runner
    speedup: gr.Plot  # the formula's speedup per runner
    explain: gr.HTML  # the table per runner and what the curves say
    status: gr.HTML


def build(ctx: AppContext, pair: str):
    """The runner section's layout: which runners to measure, a button, the two figures, the words."""
    gr.Markdown("#### What a step costs through each runner: c and v(k)")
    with gr.Row():
        runners = gr.CheckboxGroup(list(RUNNER_CHOICES), value=[RUNNER_CHOICES[0]], label="Runners to measure",
                                   info="each chosen runner runs a few forwards of both models (compiled: "
                                        "each shape compiles first, minutes on a CPU)", scale=3,
                                   elem_id="th-runners")
        button = gr.Button("Measure c and v(k) per runner", scale=1, elem_id="th-measure-runners")
    with gr.Row():
        v_plot = gr.Plot(runner_views.v_figure({}), show_label=False, elem_id="th-runner-v")
        speedup = gr.Plot(runner_views.speedup_figure({}, None, 0), show_label=False, elem_id="th-runner-speedup")
    explain = gr.HTML(runner_views.runners_html({}, None, 0, pair), css_template=theory.CSS,
                      elem_id="th-runner-explain")
    status = gr.HTML(status_html("Measured once per pair and runner in this app run, then reused."),
                     elem_id="th-runner-status")
    return RunnerView(v_plot, speedup, explain, status), runners, button


def wire(ctx: AppContext, view: RunnerView, runners, button, chosen: list, gamma) -> None:
    """Redraw on the tab's pair, temperature, γ and draft model; measure on the button."""
    pair, _, temperature, draft = chosen
    redraw = redraw_handler(ctx, view)
    for control in (pair, temperature, gamma, draft):
        control.change(redraw, inputs(chosen, gamma), figures(view), queue=False, api_visibility="private")
    form = RunnersForm(pair, runners, temperature, gamma, draft)
    model_job(button, partial(handle, ctx, view), form, outputs(view), view.status, "measure_runners")


def figures(view: RunnerView) -> list:
    return [view.v, view.speedup, view.explain]


def inputs(chosen: list, gamma) -> list:
    """What a redraw reads, in redraw's order: the tab's pair, temperature, γ and draft model."""
    pair, _, temperature, draft = chosen
    return [pair, temperature, gamma, draft]


def draw(ctx: AppContext, view: RunnerView, session, pair: str, temperature: float, gamma, draft: str = "") -> dict:
    """The section from this app run's costs of the pair (with `draft`, else its own draft) per runner and
    this session's α of that draft model."""
    costs = {}
    if pair in ctx.registry.pairs:
        spec = ctx.registry.pair(pair)
        costs = ctx.costs.known(spec.target, draft or spec.draft)
    _, pooled = pooled_for(ctx.measurements.get(session), pair, MODEL, temperature, draft)
    alpha = None if pooled is None else pooled.alpha
    gamma = int(gamma) if isinstance(gamma, (int, float)) and not isinstance(gamma, bool) else KNOBS["gamma"].default
    return {view.v: runner_views.v_figure(costs), view.speedup: runner_views.speedup_figure(costs, alpha, gamma),
            view.explain: runner_views.runners_html(costs, alpha, gamma, f"{pair} drafted by {draft}" if draft else pair)}


def redraw_handler(ctx: AppContext, view: RunnerView):
    def redraw(pair: str, temperature: float, gamma, draft: str = "", request: gr.Request = None) -> dict:
        return draw(ctx, view, session_of(request), pair, temperature, gamma, draft)

    return redraw


def check_runners(runners) -> list[str]:
    """The chosen runners, or a ValueError naming the field and what it allows."""
    chosen = [runners] if isinstance(runners, str) else list(runners or [])
    bad = [r for r in chosen if r not in RUNNER_CHOICES]
    if not chosen or bad:
        raise ValueError(f"runners must be one or more of: {', '.join(RUNNER_CHOICES)}, got {runners!r}")
    return chosen


def handle(ctx: AppContext, view: RunnerView, form: RunnersForm) -> Iterator[dict]:
    """Measure c and v(k) of the pair through each chosen runner (cached per pair and runner); a runner
    that cannot run the pair is named with why, and the others are still measured."""
    chosen, settings = yield from parsed(view.status, form.parse)
    loaded = yield from load_pair(ctx, settings, view.status)
    failed = yield from guarded(view.status, measuring(ctx, view, loaded, chosen), "Measurement failed")
    done = "Measured " + ", ".join(r for r in chosen if r not in failed) if len(failed) < len(chosen) else ""
    note = "; ".join(f"{r}: {why}" for r, why in failed.items())
    message = ". ".join(m for m in (done, f"Not measured: {note}" if note else "") if m) + "."
    yield {**draw(ctx, view, form.session, settings.pair, settings.temperature, settings.gamma, settings.draft),
           view.status: status_html(message, error=bool(failed) and not done)}


def measuring(ctx: AppContext, view: RunnerView, loaded, chosen: list[str]):
    """Each runner's costs in lockstep, its progress in the status box; returns {runner: why} of those
    that could not run this pair (a runner that does not take its models says so, the rest go on)."""

    def work(report):
        from playground.measure.bench.machine import spare_a_core

        failed = {}
        for i, runner in enumerate(chosen):
            report(i, len(chosen), runner)
            try:
                with spare_a_core():  # the same threads as the runs the costs are set beside
                    ctx.costs.cost(loaded, runner, VERIFY_K)
            except (ValueError, NotImplementedError, RuntimeError) as e:
                failed[runner] = str(e)
        report(len(chosen), len(chosen), "done")
        return failed

    def show(done: int, total: int, runner: str) -> dict:
        what = "all measured" if done == total else f"measuring {runner}"
        return {view.status: status_html(f"c and v(k) per runner: {what} ({done}/{total})", done / total)}

    return (yield from streamed(work, show, start=ctx.on_models(loaded)))
