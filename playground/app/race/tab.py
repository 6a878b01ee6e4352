"""The Race tab: layout first, then the wiring to one typed generator handler.

The handler yields one dict per frame, keyed by the view's components: both runs' coloured
text, three plots, the stats panel and a status line. Rendering and plotting are pure functions
of the events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

import gradio as gr

from playground.config import DRAFTER_LABELS, TREE, RunConfig
from playground.engine.events import summarize
from playground.app.shared import controls
from playground.app.shared import plots
from playground.app.shared import render
from playground.app.race import summary
from playground.app.shared.context import AppContext
from playground.app.shared.examples import RACE as EXAMPLES
from playground.app.shared.flow import (check_prompt, compiling, fail, guarded, in_order, load_pair, model_job,
                                        outputs, read_settings, status_html)
from playground.app.shared.sessions import session_of
from playground.measure.teach.points import point_from_race
from playground.app.race.frames import BASELINE, SPECULATIVE, TIMING_NOTE, RaceFrame, race_frames

TITLE = "Race"
log = logging.getLogger(__name__)



@dataclass(frozen=True)
class RaceView:
    """What a race redraws; field order is the API's result order."""

    baseline: gr.HTML  # the autoregressive run's coloured text
    speculative: gr.HTML
    tokens: gr.Plot  # tokens over time
    speedup: gr.Plot  # the running speedup
    accept: gr.Plot  # acceptance by draft position
    stats: gr.HTML
    status: gr.HTML


def build(ctx: AppContext) -> dict:
    with gr.Row():
        with gr.Column(scale=3):
            prompt = controls.prompt_box()
            with gr.Row():
                run = gr.Button("Run the race", variant="primary", scale=3, elem_id="run")
                stop = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
            status = gr.HTML(
                status_html("Pick an example or write a prompt, then run the race."),
                js_on_load=None,
                elem_id="status",
            )
            examples_at = gr.Column()  # filled below, once the controls it sets exist
        with gr.Column(scale=2):
            knobs, more = controls.settings_controls(ctx)
            with more:
                system = controls.system_box()
    with examples_at:
        gr.Examples(
            [list(e[1:]) for e in EXAMPLES],
            inputs=[prompt, knobs["drafter"], knobs["gamma"], knobs["temperature"], knobs["max_new_tokens"]],
            example_labels=[e[0] for e in EXAMPLES],
            label="Examples: click one, then Run",
        )
    gr.HTML(render.legend_html(), css_template=render.CSS, js_on_load=None)
    gr.Markdown(
        f"<small>{TIMING_NOTE} Hover a token for p(x), q(x), min(1, p/q) and the uniform u drawn.</small>"
    )
    with gr.Row(equal_height=True):
        baseline_text = gr.HTML(
            render.render_run(run_title(BASELINE), "", []),
            css_template=render.CSS,
            js_on_load=None,
            elem_id="baseline-text",
        )
        spec_text = gr.HTML(
            render.render_run(run_title(SPECULATIVE), "", []),
            css_template=render.CSS,
            js_on_load=None,
            elem_id="speculative-text",
        )
    with gr.Row():
        stats = gr.HTML(summary.placeholder(), css_template=summary.CSS, js_on_load=None, elem_id="stats")
        tokens_plot = gr.Plot(label="tokens over time", show_label=False)
    with gr.Row():
        speedup_plot = gr.Plot(label="running speedup", show_label=False)
        accept_plot = gr.Plot(label="acceptance by draft position", show_label=False)

    view = RaceView(baseline_text, spec_text, tokens_plot, speedup_plot, accept_plot, stats, status)
    # preprocess=False: raw values reach RunConfig, whose errors name the field (see controls.py).
    handler = race_handler(ctx, view)

    def race_event(request: gr.Request, prompt: str, system: str, **knobs) -> Iterator[dict]:
        # Gradio passes the session only to a parameter typed gr.Request; finished races become
        # points on this session's theory view.
        yield from handler(prompt, system, *in_order(knobs), session=session_of(request))

    model_job(run, race_event, [prompt, system], outputs(view), status, "race", stop=stop, stop_api="stop",
              knobs=knobs, stops=ctx.stops)
    controls.follow_pair(ctx, knobs)
    return {"view": view}


def race_handler(ctx: AppContext, view: RaceView):
    """The Run handler, bound to this app's context (its pair cache) and view by closure."""

    def race(prompt: str, system: str, *knobs, session: str | None = None) -> Iterator[dict]:
        try:
            settings = read_settings(dict(zip(RunConfig.names(), knobs, strict=True)))
            check_prompt(prompt)  # a bad knob or prompt fails before anything loads
            if system:
                check_prompt(system, "system prompt", empty_ok=True)
        except ValueError as e:
            yield from fail(view.status, str(e))
        pair = yield from load_pair(ctx, settings, view.status, prompt=(prompt, system))
        flag = ctx.stops.begin(session)  # Stop raises it; the race checks it after each step
        try:
            settings, tree = yield from tree_check(ctx, pair, settings, view.status, prompt=(prompt, system))
            for frame in race_frames(pair, prompt, system, settings, every=ctx.frame_every, stopped=flag.is_set):
                if flag.is_set():  # stopped: a cut-short race is neither shown as finished nor measured,
                    # and its last output says so (Gradio re-sends a finished job's last output)
                    yield {view.status: status_html("Stopped.")}
                    return
                if (point := point_from_race(frame, prompt[:40])) is not None:
                    ctx.measurements.add(session, point)
                yield shown(view, frame, pair.random_weights, tree)
        except ValueError as e:  # the prompt or settings do not fit the model (context length…)
            yield from fail(view.status, str(e))
        except Exception as e:
            log.exception("race failed")
            yield from fail(view.status, f"Generation failed: {type(e).__name__}: {e}")
        finally:
            ctx.stops.end(session, flag)

    return race


def tree_check(ctx: AppContext, pair, settings: RunConfig, status, prompt: tuple[str, str] | None = None):
    """`settings, tree = yield from tree_check(...)`: for a tree race, the target's measured v(k)
    (measured now to the tree's nodes + 1 if this app run has none: a few forwards), the draft's
    measured c, which the stats panel's forecast reads (measure/teach/tree_budget.py), and the line saying
    the budget came from that curve; the settings as the race runs them: a budget left at its
    default becomes the largest the curve verifies cheaply. (None, None, None) for a chain."""
    if settings.speculation != TREE:
        return settings, (None, None, None)
    yield {status: status_html("Measuring v(k) of the target for the tree's forecast (a few forwards)…")}
    curve, chain_c = ctx.costs.tree_check(pair, settings)
    settings, note = at_cheap_budget(ctx, settings, curve)
    if note is not None:  # the smaller tree's step shapes too, so nothing compiles in mid-race
        yield {status: status_html(note[0].upper() + note[1:] + ".")}
        yield from guarded(status, compiling(pair, settings, status, prompt),
                           f"Could not compile the steps of {settings.pair or 'the default pair'}")
    return settings, (curve, chain_c, note)


def at_cheap_budget(ctx: AppContext, settings: RunConfig, curve) -> tuple[RunConfig, str | None]:
    """The settings with a tree budget left at its default replaced by the largest the measured curve
    verifies cheaply (measure/tree_budget.default_budget), and the line saying so; a budget the user
    set, or one the curve verifies cheaply, is kept (None)."""
    from playground.measure.teach.tree_budget import default_budget

    default = controls.shown_default(ctx, "tree_budget", settings.pair)
    if curve is None or settings.tree_budget != default:
        return settings, None
    budget, note = default_budget(curve.v, default)
    return (settings if note is None else replace(settings, tree_budget=budget)), note


def shown(view: RaceView, frame: RaceFrame, random_weights: bool, tree=(None, None, None)) -> dict:
    """Every output of the view for one frame of the race (tree: tree_check's curve, c and budget line)."""
    base, spec = frame.baseline, frame.speculative
    a_spans, s_spans = frame.spans
    metrics = summarize(spec.events, baseline=base.events)
    return {
        view.baseline: render.render_run(run_title(BASELINE), run_meta(base), a_spans),
        view.speculative: render.render_run(run_title(SPECULATIVE, frame.settings.drafter), run_meta(spec), s_spans),
        view.tokens: plots.tokens_over_time(base.events, spec.events),
        view.speedup: plots.running_speedup(
            base.events, spec.events, metrics.predicted_speedup if metrics.drafted else None
        ),
        view.accept: plots.acceptance_by_position_figure(spec.events, metrics.alpha if metrics.drafted else None),
        view.stats: summary.stats_html(frame, *tree),
        view.status: status_html(status_line(frame, random_weights)),
    }


def run_title(name: str, drafter: str | None = None) -> str:
    if name == BASELINE:
        return "Target alone · autoregressive"
    return (
        f"Speculative · {DRAFTER_LABELS.get(drafter, drafter)} proposes, target verifies"
        if drafter
        else "Speculative · draft proposes, target verifies"
    )


def run_meta(track) -> str:
    done = " · done" if track.finished else ""
    return f"{len(track.tokens)} tokens · {len(track.events)} target calls · {track.clock:.2f} s{done}"


def status_line(frame: RaceFrame, random_weights: bool) -> str:
    note = "\nRandom-weight pair: the text is gibberish, the mechanics are real." if random_weights else ""
    a, s = frame.baseline, frame.speculative
    if not frame.done:
        return f"Racing… autoregressive {len(a.tokens)} tokens, speculative {len(s.tokens)} tokens.{note}"
    return (
        f"Done. Autoregressive: {len(a.tokens)} tokens in {a.clock:.1f} s of compute; "
        f"speculative: {len(s.tokens)} tokens in {s.clock:.1f} s.{note}"
    )
