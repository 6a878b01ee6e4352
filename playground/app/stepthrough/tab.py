"""The Step-through tab: one speculative step per click, every stage explained beside its numbers.

The paused run lives in this session's gr.State (a Stepper), which the StepForm carries: Next step
advances it by one target call; changing the prompt or a knob starts over; Back to start closes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr

from playground.config import MODEL, RunConfig
from playground.app.shared import controls
from playground.app.shared import plots
from playground.app.shared import render
from playground.app.stepthrough import plots as step_plots
from playground.app.stepthrough import view as step_view
from playground.app.stepthrough import tree_view
from playground.app.shared.context import SERIAL, AppContext
from playground.app.shared.layout import opening
from playground.app.shared.examples import STEP_THROUGH as EXAMPLES
from playground.app.shared.flow import (at_once, check_prompt, guarded, load_pair, model_job, outputs, parsed,
                                        random_weights_note, read_settings, status_html)
from playground.app.shared.form import Form
from playground.engine.model_thread import device_of
from playground.app.stepthrough.run import Stepper, close_stepper, start, stepper_key

TITLE = "Step-through"

SESSION_TTL_S = 1800  # a paused run (and the models it holds) is dropped after this long unused
PLACEHOLDER = "The new text appears here, token by token, coloured by fate."
FIRST_FIGURE = "The bar charts of q and p appear after the first step."


@dataclass(frozen=True)
class StepForm(Form):
    """What a step reads from the page; field order is the API's parameter order (the paused run
    is session state: Gradio keeps it out of the API)."""

    prompt: str
    so_far: str  # the answer so far, which the run continues ("" for none)
    stepper: Stepper | None  # this session's paused run, None before the first step
    knobs: dict  # every RunConfig field by name, as the page sends it

    def parse(self) -> RunConfig:
        """The run's settings and the texts, checked before anything loads (ValueError names the field)."""
        settings = read_settings(self.knobs)
        check_prompt(self.prompt)
        if self.so_far:
            check_prompt(self.so_far, "text so far", empty_ok=True)
        return settings


@dataclass(frozen=True)
class StepView:
    """What a step redraws; field order is the API's result order."""

    stepper: gr.State  # this session's paused run (a Stepper)
    text: gr.HTML  # the text so far, coloured by fate
    stages: gr.HTML  # draft, verify, residual or bonus, each explained beside its numbers
    figure: gr.Plot  # q and p per tested position, or the drawn tree
    status: gr.HTML


def build(ctx: AppContext) -> dict:
    inputs, settings = opening(
        "Run speculative sampling **one step at a time**: the draft model guesses, the target checks every "
        "guess in one pass, keeps some, and adds a token of its own. "
        "Each stage is explained beside its numbers."
    )
    with inputs:
        prompt = gr.Textbox(
            label="Prompt", lines=3, max_lines=12, elem_id="st-prompt", value=EXAMPLES[0][1]
        )
        so_far = gr.Textbox(
            label="Text so far (optional): the answer is continued from here",
            lines=1,
            max_lines=6,
            elem_id="st-so-far",
        )
        with gr.Row():
            step = gr.Button("Next step ▶", variant="primary", scale=3, elem_id="st-next")
            reset = gr.Button("Back to start", scale=1, elem_id="st-reset")
        status = gr.HTML(status_html("Press Next step to run the first step."), elem_id="st-status")
        examples_at = gr.Column()
    with settings:
        knobs, _ = controls.settings_controls(ctx)
        for name, component in knobs.items():  # the Race tab has the same controls: keep ids unique
            component.elem_id = f"st-{name}"
        knobs["temperature"].value = EXAMPLES[0][4]
    with examples_at:
        gr.Examples(
            [list(e[1:]) for e in EXAMPLES],
            inputs=[prompt, knobs["drafter"], knobs["gamma"], knobs["temperature"]],
            example_labels=[e[0] for e in EXAMPLES],
            label="Examples: click one, then Next step",
        )
    gr.HTML(
        render.legend_html((render.ACCEPTED, render.REJECTED, render.RESAMPLED, render.BONUS)),
        css_template=render.CSS,
    )
    text = gr.HTML(
        step_view.text_html("", [], PLACEHOLDER), css_template=render.CSS + step_view.CSS, elem_id="st-text"
    )
    with gr.Row():
        with gr.Column(scale=5):
            stages = gr.HTML(
                step_view.intro_html(), css_template=render.CSS + step_view.CSS, elem_id="st-stages"
            )
        with gr.Column(scale=6):
            figure = gr.Plot(
                plots.empty_figure(FIRST_FIGURE),
                show_label=False,
                elem_id="st-plot",
            )
    stepper = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=close_stepper)

    view = StepView(stepper, text, stages, figure, status)
    model_job(step, partial(handle, ctx, view), StepForm(prompt, so_far, stepper, knobs), outputs(view),
              status, "step")
    reset.click(reset_handler(view), [stepper], outputs(view), api_name="step_reset", **SERIAL)
    controls.follow_pair(ctx, knobs)
    return {"view": view}


def handle(ctx: AppContext, view: StepView, form: StepForm) -> Iterator[dict]:
    """Next step: check the form, load the pair, take up the paused run (or start one), run one
    target call and show it; any failure is a message in the status box."""
    settings = yield from parsed(view.status, form.parse)
    pair = yield from load_pair(ctx, settings, view.status)
    stepper, note = yield from guarded(view.status, at_once(lambda: paused_run(ctx, pair, form, settings)),
                                       "Could not start or resume the run")
    event = yield from guarded(view.status, at_once(lambda: ctx.model_thread.run(device_of(pair), stepper.step)),
                               "Generation failed")
    if event is None:
        done = "The run has finished. Press Back to start (or change the prompt) to go again."
        yield {view.stepper: stepper, view.status: status_html(done)}
        return
    yield shown(view, stepper, event, pair, note)


def paused_run(ctx: AppContext, pair, form: StepForm, settings: RunConfig) -> tuple[Stepper, str]:
    """(the run to step, a note for the status line): the session's paused run, resumed on the
    reloaded pair if another pair had freed its models; or a fresh one when there is none, or the
    prompt or settings changed. ValueError: the prompt does not fit the context, a bad n-gram range…"""
    stepper, key = form.stepper, stepper_key(form.prompt, form.so_far, settings)
    paused = isinstance(stepper, Stepper)
    if paused and stepper.released and stepper.key == key:
        stepper.resume(pair)  # its models were freed for another pair while it was paused: replay, go on
        ctx.cache.hold(pair, stepper.release)
        return stepper, ("The models were freed while this run was paused (another pair needed them); "
                         "reloaded. ")
    if paused and stepper.key == key and stepper.pair is pair:
        return stepper, ""
    if paused:
        stepper.close()
    fresh = start(pair, form.prompt, form.so_far or "", settings)
    ctx.cache.hold(pair, fresh.release)  # paused, it lets go when the pair is evicted
    return fresh, "The prompt or settings changed, so the run started over. " if paused else ""


def shown(view: StepView, stepper: Stepper, event, pair, note: str = "") -> dict:
    steps = len(stepper.history)
    tokens = len(stepper.track.tokens)
    line = (
        f"{note}Step {steps}: {len(event.emitted)} new token{'s' if len(event.emitted) != 1 else ''} from "
        f"one target call; {tokens} tokens in {steps} calls so far."
    )
    line += " The run has finished." if stepper.finished else " Press Next step for the next one."
    line += random_weights_note(pair)
    stages, figure = step_panels(event, stepper, steps)
    return {
        view.stepper: stepper,
        view.text: step_view.text_html(stepper.context, stepper.track.spans.spans, PLACEHOLDER),
        view.stages: stages,
        view.figure: figure,
        view.status: status_html(line),
    }


def step_panels(event, stepper: Stepper, steps: int) -> tuple:
    """The stages and the figure: q and p bars for a chain step, the drawn tree for a tree step."""
    if event.tree is not None:
        note = None if stepper.drafter == MODEL else stepper.note  # the draft model's tree has its own text
        return (tree_view.tree_step_html(event, stepper.label, stepper.greedy, steps, note),
                tree_view.tree_figure(event, stepper.label, stepper.greedy))
    return (step_view.step_html(event, stepper.label, stepper.greedy, stepper.note, steps),
            step_plots.step_figure(event, stepper.label, stepper.greedy))


def reset_handler(view: StepView):
    """Back to start: close the paused run and show the page as it opened."""

    def reset(stepper: Stepper | None) -> dict:
        close_stepper(stepper)
        return {
            view.stepper: None,
            view.text: step_view.text_html("", [], PLACEHOLDER),
            view.stages: step_view.intro_html(),
            view.figure: plots.empty_figure(FIRST_FIGURE),
            view.status: status_html("Back at the start. Press Next step to run the first step."),
        }

    return reset
