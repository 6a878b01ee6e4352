"""The Race tab: layout first, then the wiring to one typed generator handler.

The page's inputs are a RaceForm, its outputs a RaceView. `handle(ctx, view, form)` yields one
dict per frame, keyed by the view's components: both runs' coloured text, three plots, the stats
panel and a status line. Rendering and plotting are pure functions of the events.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

import gradio as gr

from playground.config import DRAFTER_LABELS, TREE, RunConfig
from playground.engine.events import summarize
from playground.app.shared import controls
from playground.app.shared import render
from playground.app.race import payoff, plots
from playground.app.race import summary
from playground.app.shared.context import AppContext
from playground.app.shared.examples import RACE as EXAMPLES
from playground.app.shared.flow import (Stop, check_prompt, drafted_head, guarded, load_pair, model_job, outputs,
                                        parsed, random_weights_note, read_settings, status_html, warmed)
from playground.app.shared.form import Form
from playground.engine.model_thread import device_of
from playground.measure.bench.race import BASELINE, SPECULATIVE
from playground.measure.teach.points import point_from_race
from playground.app.race.frames import TIMING_NOTE, RaceFrame, race_frames

TITLE = "Race"


@dataclass(frozen=True)
class RaceForm(Form):
    """What a race reads from the page; field order is the API's parameter order."""

    prompt: str
    system: str  # the system prompt, "" for none
    knobs: dict  # every RunConfig field by name, as the page sends it: the API takes each by its name
    # whether γ is the user's: the page's gr.State, True once the user moves the γ control; False while it
    # shows the pair's suggestion, so the race runs the pair's γ followed here (at_followed_gamma). Not
    # an API parameter: an API call (which loads no page) keeps True, so its γ runs as given
    gamma_set: bool = True
    # whether the draft vocabulary is the user's, kept as gamma_set is: while the page shows the pair's
    # suggestion, the draft's head (cut or whole) is the one measured faster here (flow.load_pair's head)
    vocab_set: bool = True

    def parse(self) -> RunConfig:
        """The run's settings, checked as far as the engine would, and the prompts: a bad knob or
        prompt fails before anything loads (ValueError names the field)."""
        settings = read_settings(self.knobs)
        check_prompt(self.prompt)
        if self.system:
            check_prompt(self.system, "system prompt", empty_ok=True)
        return settings

    @property
    def prompts(self) -> tuple[str, str]:
        return self.prompt, self.system


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


EXAMPLE_KNOBS = ("drafter", "gamma", "temperature", "max_new_tokens")  # what an example sets beside the prompt


def build(ctx: AppContext) -> dict:
    with gr.Row():
        with gr.Column(scale=3):
            # the page opens on the first example, so the first click on Run races it
            prompt = controls.prompt_box(EXAMPLES[0][1])
            examples_at = gr.Column()  # filled below, once the controls it sets exist
            with gr.Row():
                run = gr.Button("Run the race", variant="primary", scale=3, elem_id="run")
                stop = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
            status = gr.HTML(
                status_html("Run the race on the first example, or pick another or write a prompt."),
                js_on_load=None,
                elem_id="status",
            )
        with gr.Column(scale=2):
            knobs, more = controls.settings_controls(ctx)
            with more:
                system = controls.system_box()
    for name, value in zip(EXAMPLE_KNOBS, EXAMPLES[0][2:]):  # and on its settings, but γ: the pair's (its
        if name != "gamma":  # suggestion, then the γ it follows on this machine) is what the first race runs
            knobs[name].value = value
    with examples_at:
        gr.Examples(
            [list(e[1:]) for e in EXAMPLES],
            inputs=[prompt, *(knobs[name] for name in EXAMPLE_KNOBS)],
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
    gamma_set, vocab_set = gr.State(True), gr.State(True)
    form = RaceForm(prompt, system, knobs, gamma_set, vocab_set)
    job = model_job(run, partial(handle, ctx, view), form, outputs(view), status, "race",
                    Stop(stop, "stop", flags=ctx.stops))
    controls.follow_pair(ctx, knobs)
    follow_gamma(ctx, knobs, gamma_set, job)
    whose(knobs, "draft_vocab", vocab_set)
    return {"view": view, "knobs": knobs, "gamma_set": gamma_set}


PRIVATE = dict(queue=False, api_visibility="private", show_progress="hidden")  # page-only events


def whose(knobs: dict, name: str, state: gr.State) -> None:
    """Whose value a knob's control holds, kept in `state`: the page's (the pair's suggestion) when the
    page loads and when the user picks a pair or draft (follow_pair then sets it); the user's once the
    user moves it (`input`, which an example or another tab's hand-over does not fire)."""
    knobs[name].input(lambda: True, None, state, **PRIVATE)
    for decider in ("pair", "draft"):
        knobs[decider].input(lambda: False, None, state, **PRIVATE)
    page = gr.context.Context.root_block
    if page is not None:
        page.load(lambda: False, None, state, **PRIVATE)


def follow_gamma(ctx: AppContext, knobs: dict, gamma_set: gr.State, job) -> None:
    """Whose γ the γ control holds (see whose). After a race, the control shows the γ the race ran at."""
    whose(knobs, "gamma", gamma_set)
    names = list(knobs)
    job.success(lambda *values: raced_gamma(ctx, dict(zip(names, values)), values[-1]),
                [*knobs.values(), gamma_set], knobs["gamma"], **PRIVATE)


def raced_gamma(ctx: AppContext, values: dict, gamma_set: bool):
    """The γ control's value after a race of these values: the followed γ where the race ran at it in
    place of the value shown, else unchanged."""
    try:
        settings = read_settings(values)
    except ValueError:
        return gr.skip()
    ran = at_followed_gamma(ctx, settings, gamma_set)
    return gr.skip() if ran.gamma == settings.gamma else ran.gamma


def handle(ctx: AppContext, view: RaceView, form: RaceForm) -> Iterator[dict]:
    """Run the race: check the form, load the pair, then race both runs frame by frame; any failure
    is a message in the status box. A finished race becomes a point of the session's theory view."""
    settings = yield from parsed(view.status, form.parse)
    settings = own_head_left(ctx, settings, form.vocab_set)
    head = pairs_head(ctx, settings, form.vocab_set)
    pair = yield from load_pair(ctx, settings, view.status, prompt=form.prompts, head=head)  # γ followed
    settings = drafted_head(pair, settings) if head else settings
    followed = at_followed_gamma(ctx, settings, form.gamma_set)
    if followed != settings:  # its step shapes too, so nothing compiles in mid-race
        settings = followed
        yield from warmed(ctx, pair, settings, view.status, form.prompts)
    pays = payoff.before_race(ctx, pair, settings, form.session)  # before the race: whether the draft can pay here
    if pays is not None and pays.shown:
        yield {view.stats: summary.stats_placeholder(pays)}
    yield from guarded(view.status, racing(ctx, view, pair, settings, form, pays), "Generation failed")


def own_head_left(ctx: AppContext, settings: RunConfig, vocab_set: bool) -> RunConfig:
    """The pair's draft vocabulary is its own draft's head: left at it on the page (`vocab_set` False)
    with another draft chosen, the run takes that draft's suggestion (its whole head). The default
    pair's 65,536-row cut otherwise followed the user to SmolLM2 and Gemma (issue 55)."""
    if vocab_set or not settings.draft or settings.pair not in (None, "", *ctx.registry.pairs):
        return settings  # an unknown pair: the load says so, naming the field
    own = ctx.suggested(settings.pair)["draft_vocab"]
    if settings.draft_vocab != own:
        return settings
    return replace(settings, draft_vocab=ctx.suggested(settings.pair, settings.draft)["draft_vocab"])


def pairs_head(ctx: AppContext, settings: RunConfig, vocab_set: bool) -> bool:
    """Whether the race's draft head is the machine's to choose: a draft vocabulary the user did not
    set (`vocab_set` False) and still at the pair's value for this draft, as the benchmark chooses
    it without --draft-vocab. A value the user set, or any other (a hand-over's), drafts as given."""
    return not vocab_set and bool(settings.draft_vocab) and \
        settings.draft_vocab == ctx.suggested(settings.pair, settings.draft)["draft_vocab"]


def at_followed_gamma(ctx: AppContext, settings: RunConfig, gamma_set: bool) -> RunConfig:
    """The settings as the race runs them: γ the user did not set (`gamma_set` False) and still at the
    pair's models.yaml value becomes the pair's γ followed on this machine (measure/bench/follow.py),
    once a load measured it, as the benchmark does without --gamma. A γ the user set, any other γ (an
    example's, another tab's), a tree, or a run the pair's α does not speak for is kept."""
    from playground.measure.bench.follow import follows

    spec = ctx.registry.pair(settings.pair or ctx.default_pair)
    followed = ctx.followed.get(spec.name)
    if (gamma_set or followed is None or settings.gamma != spec.gamma or settings.speculation == TREE
            or not follows(spec, settings)):
        return settings
    return replace(settings, gamma=followed.gamma)


def racing(ctx: AppContext, view: RaceView, pair, settings: RunConfig, form: RaceForm, pays=None) -> Iterator[dict]:
    """The race's frames, checking the session's stop flag (Stop raises it) after each engine step; `pays`:
    payoff's verdict, which the stats panel keeps saying where the draft cannot pay."""
    with ctx.stops.held(form.session) as flag:
        settings, tree = yield from tree_check(ctx, pair, settings, view.status, prompt=form.prompts)
        drafter, frame = ctx.drafter_for(form.session, pair, settings), None
        frames = race_frames(pair, form.prompt, form.system, settings, every=ctx.frame_every,
                             stopped=flag.is_set, drafter=drafter)
        for frame in ctx.model_thread.iterate(device_of(pair), frames):  # a GPU's forwards on its one thread
            if flag.is_set():  # stopped: a cut-short race is neither shown as finished nor measured,
                # and its last output says so (Gradio re-sends a finished job's last output)
                yield {view.status: status_html("Stopped.")}
                return
            if (point := point_from_race(frame, form.prompt[:40])) is not None:
                ctx.measurements.add(form.session, point)
            yield shown(view, frame, pair, tree, pays)
        if frame is not None and frame.done and (note := followed_note(ctx, settings, frame)) is not None:
            yield {view.status: status_html(f"{status_line(frame)} {note}{random_weights_note(pair)}")}


def followed_note(ctx: AppContext, settings: RunConfig, frame: RaceFrame) -> str | None:
    """After a race of the pair's own draft (a chain at a fixed γ), once the pair's γ is followed here:
    that it ran at that γ, where it did; then the γ the formula calls for at the α this race measured
    (not models.yaml's: the race is what these prompts reach) with the c and v(k) the γ was followed
    from, where that forecasts more than the race measured (follow.advised). None where nothing is said."""
    from playground.measure.bench.follow import advised, follows

    spec = ctx.registry.pair(settings.pair or ctx.default_pair)
    followed = ctx.followed.get(spec.name)
    if followed is None or settings.speculation == TREE or settings.adaptive or not follows(spec, settings):
        return None
    alpha, speedup = race_result(frame)
    said = [f"This race ran at the pair's γ here: {followed.line()}."] if settings.gamma == followed.gamma else []
    if alpha is None or speedup is None:  # nothing drafted, or no time measured: only the pair's α speaks
        if settings.gamma != followed.gamma:
            said.append(f"This race ran at γ {settings.gamma}; {followed.line()}. Set γ to {followed.gamma} to race it.")
    elif (advice := advised(followed, alpha, settings.gamma, speedup)) is not None:
        said.append(f"At the α this race measured ({alpha:.2f}) and the c ({followed.c:.2f}) and v(k) measured at load, "
                    f"the formula calls for γ {advice.gamma}: a forecast {advice.forecast:.2f}× against the "
                    f"{speedup:.2f}× this race measured at γ {settings.gamma}. Set γ to {advice.gamma} to race it.")
    return " ".join(said) or None


def race_result(frame: RaceFrame) -> tuple[float | None, float | None]:
    """(α, speedup) a finished race measured, as its stats panel shows them; None where nothing was
    drafted (α) or timed (speedup)."""
    plain = summarize(frame.baseline.events)
    spec = summarize(frame.speculative.events, baseline=frame.baseline.events)
    speedup = spec.tok_s / plain.tok_s if plain.tok_s and spec.tok_s else None
    return (spec.alpha if spec.drafted else None), speedup


def tree_check(ctx: AppContext, pair, settings: RunConfig, status, prompt: tuple[str, str] | None = None):
    """`settings, tree = yield from tree_check(...)`: for a tree race, the target's measured v(k)
    (measured now to the tree's nodes + 1 if this app run has none: a few forwards), the draft's
    measured c, which the stats panel's forecast reads (measure/teach/tree_budget.py), and the line saying
    the budget came from that curve; the settings as the race runs them: a budget left at its
    default becomes the largest the curve verifies cheaply. (None, None, None) for a chain."""
    if settings.speculation != TREE:
        return settings, (None, None, None)
    yield {status: status_html("Measuring v(k) of the target for the tree's forecast (a few forwards)…")}
    curve, chain_c = ctx.model_thread.run(device_of(pair), ctx.costs.tree_check, pair, settings)
    settings, note = at_cheap_budget(ctx, settings, curve)
    if note is not None:  # the smaller tree's step shapes too, so nothing compiles in mid-race
        yield {status: status_html(note[0].upper() + note[1:] + ".")}
        yield from warmed(ctx, pair, settings, status, prompt)
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


def shown(view: RaceView, frame: RaceFrame, pair, tree=(None, None, None), pays=None) -> dict:
    """Every output of the view for one frame of the race (tree: tree_check's curve, c and budget line;
    pays: payoff's verdict)."""
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
        view.stats: summary.stats_html(frame, *tree, pays=pays),
        view.status: status_html(status_line(frame) + random_weights_note(pair)),
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


def status_line(frame: RaceFrame) -> str:
    a, s = frame.baseline, frame.speculative
    if frame.checking:
        return (f"Raced: autoregressive {len(a.tokens)} tokens, speculative {len(s.tokens)} tokens; the greedy texts "
                "differ, so both runs are rerun untimed, with detail, to measure the target's margins where they part…")
    if not frame.done:
        return f"Racing… autoregressive {len(a.tokens)} tokens, speculative {len(s.tokens)} tokens."
    return (
        f"Done. Autoregressive: {len(a.tokens)} tokens in {a.clock:.1f} s of compute; "
        f"speculative: {len(s.tokens)} tokens in {s.clock:.1f} s."
    )
