"""The Lesson tab: six short steps on the loaded pair; in each the learner predicts a number (or a
verdict), presses Measure, and sees the prediction beside the measurement. Progress lives in a
gr.State, so it is kept per browser session.

Measurements reuse the app's own layers: a generation through the bench's engine_run (steps 1,
2), the fast lab (step 3), measure/teach/theory.py's measure_point, i.e. bench.measure's alternated
warm timing (steps 4, 5), whose points also reach this session's Theory tab, and the app's per-runner
costs (step 6: c and v(k) through the run's runner, which the Theory tab draws beside the others).
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import gradio as gr

from playground.config import RunConfig
from playground.app.shared import controls, identity
from playground.app.lesson import steps as lesson
from playground.app.lesson.views import HEIGHT, VIEWS
from playground.app.shared import plots
from playground.app.shared.context import AppContext
from playground.app.shared.flow import (Stop, check_prompt, guarded, load_pair, model_job, outputs, parsed,
                                        read_settings, status_html)
from playground.app.shared.form import Form
from playground.app.lesson.steps import CHOICE, STEPS, Progress
from playground.app.shared.lockstep import new_thread, streamed
from playground.measure.teach.theory import measure_point

TITLE = "Lesson"

DEFAULT_PROMPT = "Write a Python function that returns the squares of a list of numbers."
TEMPERATURE = 0.7  # sampled, so acceptance is the probabilistic min(1, p/q) of steps 2 and 3
TOKENS = 32  # new tokens per generation or timed run: seconds on a CPU, enough steps to count
LAB_DRAWS = 5_000
EMPTY = "The measurement appears here."

CSS = """
.lesson { font-size: 14px; line-height: 1.5; }
.lesson .steps { display: flex; gap: 6px; flex-wrap: wrap; }
.lesson .steps span { padding: 3px 10px; border-radius: 12px; border: 1px solid var(--border-color-primary); }
.lesson .steps span.here { font-weight: 700; border-color: var(--color-accent); }
.lesson .steps span.done { background: rgba(34, 160, 70, .14); }
.lesson table { border-collapse: collapse; margin: 6px 0; font-variant-numeric: tabular-nums; border: none; }
.lesson td, .lesson th { padding: 3px 10px; border: none; border-bottom: 1px solid var(--border-color-primary);
  text-align: right; }
.lesson td:first-child, .lesson th:first-child { text-align: left; }
.lesson .close, .lesson .exact { color: #137333; font-weight: 700; }
.lesson .off { color: #b42318; font-weight: 700; }
.lesson .hint { color: var(--body-text-color-subdued); font-size: 12.5px; }
""" + identity.CSS


@dataclass(frozen=True)
class LessonForm(Form):
    """What Measure reads from the page; field order is the API's parameter order (the learner's
    progress is session state: Gradio keeps it out of the API)."""

    state: Progress  # this session's progress through the steps
    prompt: str
    pair: str
    prediction: float | None  # a number to predict, or
    choice: str | None  # a verdict, in the steps that ask for one
    gamma: int  # step 4's γ

    @property
    def lesson(self) -> Progress:
        return self.state if isinstance(self.state, Progress) else Progress()

    def parse(self) -> tuple[object, RunConfig]:
        """(the checked prediction, the run's settings) for the current step, before anything loads."""
        i, step = self.lesson.step, STEPS[self.lesson.step]
        check_prompt(self.prompt)
        predicted = lesson.check_prediction(step, self.choice if step.kind == CHOICE else self.prediction)
        return predicted, read_settings({"pair": self.pair, "gamma": self.gamma if i == 3 else 4,
                                         "temperature": TEMPERATURE, "max_new_tokens": TOKENS})


@dataclass(frozen=True)
class LessonPage:
    """What moving between steps redraws; field order is the order of the navigation's outputs."""

    state: gr.State  # this session's Progress
    bar: gr.HTML  # the steps, the current one marked
    text: gr.Markdown  # the step's explanation and experiment
    prediction: gr.Number  # a number to predict, or
    choice: gr.Radio  # a verdict to choose
    gamma: gr.Slider  # step 4's γ
    run: gr.Button
    result: gr.HTML  # the prediction beside the measurement
    plot: gr.Plot
    status: gr.HTML

    def measured(self) -> list:
        """What a measurement redraws, in the API's result order."""
        return [self.result, self.plot, self.bar, self.state, self.status]


def build(ctx: AppContext) -> dict:
    state = gr.State(Progress())
    bar = gr.HTML(progress_html(Progress()), css_template=CSS, elem_id="lesson-progress")
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Markdown(step_markdown(0), elem_id="lesson-text")
            prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="lesson-prompt")
            pair = controls.pair_control(ctx, "lesson-pair")
        with gr.Column(scale=2):
            prediction = gr.Number(None, label=STEPS[0].question, elem_id="lesson-prediction")
            choice = gr.Radio(list(STEPS[2].choices), label=STEPS[2].question, visible=False,
                              elem_id="lesson-choice")
            gamma = controls.control("gamma", visible=False, elem_id="lesson-gamma")
            run = gr.Button(STEPS[0].button, variant="primary", elem_id="lesson-run")
            stop = gr.Button("Stop", variant="stop", size="sm", elem_id="lesson-stop")
            status = gr.HTML(status_html("Predict first, then measure."), elem_id="lesson-status")
    with gr.Row():
        result = gr.HTML(css_template=CSS, elem_id="lesson-result")
        plot = gr.Plot(plots.empty_figure(EMPTY, HEIGHT), show_label=False,
                       elem_id="lesson-plot")
    with gr.Row():
        back = gr.Button("← Back", elem_id="lesson-back")
        forward = gr.Button("Next step →", elem_id="lesson-next")
    page = LessonPage(state, bar, text, prediction, choice, gamma, run, result, plot, status)
    back.click(lambda s: show_step(page, s.moved(-1)), state, outputs(page), api_name="lesson_back")
    forward.click(lambda s: show_step(page, s.moved(1)), state, outputs(page), api_name="lesson_next")
    controls.describe_pair(ctx, pair)
    model_job(run, partial(handle, ctx, page), LessonForm(state, prompt, pair, prediction, choice, gamma),
              page.measured(), status, "lesson", Stop(stop, "lesson_stop"))
    return {"view": page}


# -- navigation ----------------------------------------------------------------------------------


def step_markdown(i: int) -> str:
    step = STEPS[i]
    return (f"### Step {i + 1} of {len(STEPS)}: {step.title}\n\n{step.text}\n\n"
            f"**Experiment.** {step.experiment}")


def progress_html(progress: Progress) -> str:
    marks = []
    for i, step in enumerate(STEPS):
        cls = " ".join(c for c, on in (("here", i == progress.step), ("done", i in progress.results)) if on)
        tick = "✓ " if i in progress.results else ""
        marks.append(f'<span class="{cls}">{tick}{i + 1}. {html.escape(step.title)}</span>')
    done = " Lesson complete: every prediction checked." if progress.finished else ""
    return f'<div class="lesson"><div class="steps">{"".join(marks)}</div>{done}</div>'


def show_step(page: LessonPage, progress: Progress) -> dict:
    """Everything that changes with the step; a finished step shows its result again."""
    i, step = progress.step, STEPS[progress.step]
    kept = progress.results.get(i)
    number = step.kind != CHOICE
    return {
        page.state: progress,
        page.bar: progress_html(progress),
        page.text: step_markdown(i),
        page.prediction: gr.update(label=step.question, visible=number,
                                   value=kept["prediction"] if kept and number else None),
        page.choice: gr.update(visible=not number, value=kept["prediction"] if kept and not number else None,
                               **({} if number else {"choices": list(step.choices), "label": step.question})),
        page.gamma: gr.update(visible=i == 3),
        page.run: gr.update(value=step.button),
        page.result: kept["html"] if kept else "",
        page.plot: kept["figure"] if kept else plots.empty_figure(EMPTY, HEIGHT),
        page.status: status_html("Measured earlier in this session." if kept else "Predict first, then measure."),
    }


# -- measuring -----------------------------------------------------------------------------------


def handle(ctx: AppContext, page: LessonPage, form: LessonForm) -> Iterator[dict]:
    """Measure: check the prediction, load the pair, run the step's experiment, show both side by side."""
    predicted, settings = yield from parsed(page.status, form.parse)
    loaded = yield from load_pair(ctx, settings, page.status)
    i = form.lesson.step
    outcome = yield from guarded(page.status, experiment(page, i, loaded, form.prompt, settings, ctx.costs,
                                                                 ctx.on_models(loaded)),
                                 "The measurement failed")
    for point in outcome.get("points", ()):
        ctx.measurements.add(form.session, point)  # the Theory tab shows them too
    shown = VIEWS[i](predicted, outcome, loaded)
    progress = form.lesson.with_result(i, {"prediction": predicted, **shown})
    nxt = " Press “Next step →”." if i + 1 < len(STEPS) else ""
    yield {page.result: shown["html"], page.plot: shown["figure"], page.bar: progress_html(progress),
           page.state: progress, page.status: status_html(f"Measured.{nxt}")}


def experiment(page: LessonPage, i: int, loaded, prompt: str, settings, costs, start=new_thread):
    """Step i's experiment in lockstep, its progress in the status box; returns its outcome.
    costs: the app's RunnerCosts (measure/teach/theory.py), which step 6 measures into."""
    from playground.models.text import encode_prompt

    ids = encode_prompt(loaded.tokenizer, prompt)
    return (yield from streamed(lambda report: EXPERIMENTS[i](loaded, ids, settings, prompt, report, costs),
                                lambda message, fraction: {page.status: status_html(message, fraction)}, start=start))


def generation(loaded, ids, settings, prompt, report, costs=None) -> dict:
    """Steps 1 and 2: one speculative generation through the bench's engine_run; its events."""
    from playground.engine import factory
    from playground.measure.bench.runs import engine_run

    report(f"Generating {settings.max_new_tokens} tokens at γ = {settings.gamma}…", None)
    eos = loaded.eos
    run = engine_run(loaded.target.model, ids, factory.spec_config(settings), factory.make_drafter(settings, factory.Models.of(loaded)), eos)
    return {"events": run.events}


def lab_draws(loaded, ids, settings, prompt, report, costs=None) -> dict:
    """Step 3: the fast losslessness lab on the prompt's first token, then greedy identity."""
    from playground.engine import factory
    from playground.measure.teach.lab import fast_lab

    report(f"Drawing {LAB_DRAWS:,} first tokens…", None)
    config = factory.spec_config(settings)
    last = fast_lab(loaded.target.model, factory.model_drafter(settings, factory.Models.of(loaded)), ids, config, LAB_DRAWS,
                    lambda r: report(f"Drawn {r.draws:,} of {LAB_DRAWS:,}", r.draws / LAB_DRAWS))
    return {"lab": last, "greedy": greedy_identity(loaded, ids, settings, report)}


def greedy_identity(loaded, ids, settings, report) -> tuple[int, object]:
    """The prompt generated greedily without and with the draft (the bench's engine_run): (the plain run's
    tokens, and where the texts part the evidence the benchmark measures there, else None)."""
    from dataclasses import replace

    from playground.engine import factory
    from playground.measure.bench.divergence import found
    from playground.measure.bench.runs import engine_run

    greedy = replace(settings, temperature=0.0)
    config = factory.spec_config(greedy)
    make = lambda: factory.make_drafter(greedy, factory.Models.of(loaded))  # noqa: E731
    report(f"Generating {settings.max_new_tokens} tokens greedily without and with the draft…", None)
    plain = engine_run(loaded.target.model, ids, config, None, loaded.eos).tokens
    spec = engine_run(loaded.target.model, ids, config, make(), loaded.eos).tokens
    return len(plain), found(loaded.target.model, ids, config, make, loaded.eos, (plain, spec),
                            identity.exact(loaded.target))


def timed(loaded, ids, settings, prompt, report, costs=None) -> dict:
    """Step 4: baseline and speculative runs at the chosen γ, warm and alternated (bench.measure)."""
    point = measure_point(loaded, ids, settings, 1, lambda d, t, what: report(f"Timing: ran {what} ({d}/{t})", d / t),
                          "lesson", prompt[:40])
    return {"points": [point]}


def timed_gammas(loaded, ids, settings, prompt, report, costs=None) -> dict:
    """Step 5: the same timing at each γ of lesson.GAMMAS."""
    from dataclasses import replace

    points = []
    for k, g in enumerate(lesson.GAMMAS):
        def each(d, t, what, k=k, g=g):
            report(f"γ = {g}: ran {what} ({d}/{t})", (k + d / t) / len(lesson.GAMMAS))

        points.append(measure_point(loaded, ids, replace(settings, gamma=g), 1, each, "lesson", prompt[:40]))
    return {"points": points}


def step_costs(loaded, ids, settings, prompt, report, costs) -> dict:
    """Step 6: c and v(1..5) of the pair through the run's runner (measured once per app run)."""
    from playground.measure.bench.machine import spare_a_core

    report(f"Timing a few forwards of each model through the {settings.runner} runner…", None)
    with spare_a_core():  # the same threads as the timed runs of steps 4 and 5
        return {"cost": costs.cost(loaded, settings.runner, lesson.VERIFY_TOKENS)}


EXPERIMENTS = (generation, generation, lab_draws, timed, timed_gammas, step_costs)
