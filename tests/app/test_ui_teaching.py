"""The teaching and tuning tabs without a browser: their pure views on hand-made events, and their
handlers called directly on the tiny random pair (no download)."""

from __future__ import annotations

import csv
import html
import json
import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from playground.engine import sampling
from playground.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, DraftToken, StepEvent
from playground.app.shared import plots
from playground.app.stepthrough import plots as step_plots
from playground.app.stepthrough import view as step_view
from playground.measure.bench import sweep
from playground.measure.bench.report import SCHEMA
from playground.app.theory import explain as theory
from playground.app.shared.context import AppContext, build_context
from playground.app.shared.lockstep import lockstep
from playground.app.shared.sessions import Measurements
from playground.measure.teach.points import Point, pool
from playground.config import MODEL, PROMPT_LOOKUP, RunConfig
from playground.app.shared.render import visible
from playground.app.stepthrough.run import Stepper
from playground.app.export import tab as tab_export
from playground.app.lab import tab as tab_lab
from playground.app.shared.flow import outputs as outputs_of
from playground.app.stepthrough import tab as tab_stepthrough
from playground.app.theory import tab as tab_theory
from playground.app.sweep import form as sweep_form
from playground.app.sweep import tab as tab_sweep
from playground.app.sweep.tab import COLUMNS


@pytest.fixture(scope="module")
def ctx():
    return build_context()


@pytest.fixture(scope="module")
def views(ctx):
    """The tabs' outputs, as the tabs build them (the handlers' dicts are keyed by these)."""
    with gr.Blocks():
        return SimpleNamespace(**{name: tab.build(ctx)["view"] for name, tab in (
            ("step", tab_stepthrough), ("theory", tab_theory), ("lab", tab_lab), ("export", tab_export))})


def values(output: dict, view) -> tuple:
    """A redraw's values in the view's field order (the API's); None for what it leaves as it is."""
    return tuple(output.get(c) for c in outputs_of(view))


def knobs(**changes) -> dict:
    """Every knob by name, as the page sends them: the tiny pair, 40 new tokens, then `changes`."""
    settings = RunConfig(pair="tiny", max_new_tokens=40)
    return {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}


def step_handler(ctx, view):
    """The Next step handler as a function of (prompt, text so far, paused run, knobs)."""
    return lambda prompt, so_far, stepper, knobs: tab_stepthrough.handle(
        ctx, view, tab_stepthrough.StepForm(prompt, so_far, stepper, knobs))


def status_of(output) -> str:
    """The status box: a handler's last text output (the Sweep's is followed by its fastest row);
    of a dict keyed by components, its last text value."""
    values = list(output.values()) if isinstance(output, dict) else list(output)
    return html.unescape(next(o for o in reversed(values) if isinstance(o, str)))


def raises_in_page(outputs_iter, message: str) -> list:
    """Run a handler to its gr.Error; the message is also in the status box (not a traceback)."""
    outputs = []
    with pytest.raises(gr.Error) as raised:
        for o in outputs_iter:
            outputs.append(o)
    assert message in raised.value.message, raised.value.message
    assert message in status_of(outputs[-1]) and "Traceback" not in status_of(outputs[-1])
    return outputs


# -- the step-through view, on hand-made events ------------------------------------------------


def event(drafts, n_accepted, next_token, next_fate, residual_top=(), next_top=()):
    """drafts: (token, q, p, accept_prob, uniform)."""
    tokens = tuple(
        DraftToken(
            t,
            q,
            p,
            a,
            u,
            ACCEPTED if i < n_accepted else REJECTED,
            top_q=((t, q), (9, 0.1)),
            top_p=((9, 0.5), (t, p)),
        )
        for i, (t, q, p, a, u) in enumerate(drafts)
    )
    emitted = tuple(d.token for d in tokens[:n_accepted]) + (next_token,)
    return StepEvent(
        0,
        len(drafts),
        tokens,
        n_accepted,
        next_token,
        next_fate,
        0.4,
        emitted,
        0,
        0,
        0,
        0,
        residual_top=residual_top,
        next_top=next_top or ((next_token, 0.4),),
    )


TEXT = {1: "def", 2: "<script>alert(1)</script>", 3: " x", 9: "\n", 5: "(", 6: "&"}


def label(token):
    return visible(TEXT.get(token, f"t{token}"))


def test_a_rejection_shows_the_numbers_the_verdict_and_the_residual():
    e = event(
        [(1, 0.9, 0.8, 0.889, 0.2), (2, 0.6, 0.1, 0.167, 0.9), (3, 0.5, 0.1, 0.2, None)],
        1,
        5,
        RESAMPLED,
        residual_top=((5, 0.6), (6, 0.3)),
    )
    page = step_view.step_html(e, label, greedy=False, note=step_view.drafter_note(MODEL), step_no=3)
    text = html.unescape(page)
    assert "Step 3" in text and "① Draft: 3 guesses" in text and "② Verify: 1 of 3 kept" in text
    assert "u < 0.889: keep" in text and "u ≥ 0.167: reject" in text and "not tested" in text
    assert "③ Residual" in text and "norm(max(0, p − q))" in text and "has residual 0" in text
    assert "kept with probability min(1, p/q)" in text  # the why, beside the numbers
    assert "the draft gave it q = 0.600 but the target only p = 0.100" in text  # and this step's own numbers
    assert "u = 0.900 is not below that: rejected, and the 1 guess after it is dropped unread" in text
    assert "<script" not in page and "&lt;script&gt;" in page  # token text is escaped
    assert "produced 2 tokens (1 kept guess + 1 from the target)" in text


def test_a_full_acceptance_shows_the_bonus_and_greedy_explains_its_rule():
    e = event(
        [(1, 0.9, 0.95, 1.0, None), (3, 0.7, 0.9, 1.0, None)], 2, 9, BONUS, next_top=((9, 0.7), (5, 0.2))
    )
    text = html.unescape(step_view.step_html(e, label, greedy=True, note=step_view.drafter_note(MODEL), step_no=1))
    assert "③ Bonus token" in text and "γ + 1 tokens for a single target call" in text
    assert "target's top" in text and "temperature 0" in text and "2 of 2 kept" in text
    greedy_reject = event([(1, 0.9, 0.2, 0.0, None)], 0, 9, RESAMPLED)
    text = html.unescape(step_view.step_html(greedy_reject, label, True, step_view.drafter_note(MODEL), 2))
    assert "differs: reject" in text and "③ Replacement" in text and "target's own top token" in text


def test_prompt_lookup_says_q_is_one_hot_and_a_plain_step_is_explained():
    e = event([(1, 1.0, 0.3, 0.3, 0.1)], 1, 3, BONUS)
    assert "q(x) = 1" in html.unescape(step_view.step_html(e, label, False, step_view.drafter_note(PROMPT_LOOKUP), 1))
    plain = StepEvent(0, 4, (), 0, 3, "target", 0.5, (3,), 0, 0, 0, 0, next_top=((3, 0.5),))
    assert "Plain step" in step_view.step_html(plain, label, False, step_view.drafter_note(PROMPT_LOOKUP), 1)


def test_step_figure_draws_q_and_p_per_tested_position_then_the_outcome():
    e = event(
        [(1, 0.9, 0.8, 0.889, 0.2), (2, 0.6, 0.1, 0.167, 0.9), (3, 0.5, 0.1, 0.2, None)],
        1,
        5,
        RESAMPLED,
        residual_top=((5, 0.6), (6, 0.3)),
    )
    fig = step_plots.step_figure(e, label, greedy=False)
    bars = [t for t in fig.data if t.x != (None,)]  # the rest are legend entries
    assert [t.name for t in bars] == [
        "q: draft",
        "p: target",
        "q: draft",
        "p: target",
        "residual",
    ]  # 2 tested
    assert {t.name for t in fig.data if t.showlegend is not False} == {"q: draft", "p: target", "residual"}
    assert "&lt;script&gt;" in " ".join(bars[2].x)  # plotly reads HTML in labels: escaped
    assert dict(zip(bars[3].x, bars[3].y, strict=True))[plots.plot_text(label(2))] == pytest.approx(0.1)


def test_visible_shows_whitespace_and_control_characters():
    assert visible(" def\n\t\x05") == "␣def↵⇥␅" and visible("") == "∅"


# -- the step-through handler on the tiny pair ----------------------------------------------------


def test_step_through_runs_one_target_call_per_click_and_shows_every_stage(ctx, views):
    handler, stepper = step_handler(ctx, views.step), None
    seen = set()
    for _ in range(12):
        outputs = list(
            handler("Once upon a time", "", stepper, knobs(temperature=1.0, seed=1, max_new_tokens=60))
        )
        assert all(set(o) <= set(outputs_of(views.step)) for o in outputs)
        assert set(outputs[-1]) == set(outputs_of(views.step))  # a step redraws everything
        stepper, text, stages, figure, status = values(outputs[-1], views.step)
        assert isinstance(stepper, Stepper)
        seen.add(stepper.history[-1].next_fate)
        assert f"Step {len(stepper.history)}" in status
        assert isinstance(figure, step_plots.go.Figure) and 'class="tok' in text
        if {RESAMPLED, BONUS} <= seen:
            break
    assert {RESAMPLED, BONUS} <= seen, seen  # a rejection with its residual and a full acceptance
    assert len(stepper.history) == len(stepper.track.events) and stepper.track.tokens


def test_changing_a_knob_starts_over_and_back_to_start_closes_the_run(ctx, views):
    view = views.step
    handler = step_handler(ctx, view)
    *_, shown = handler("def f(x):", "", None, knobs())
    first = shown[view.stepper]
    *_, shown = handler("def f(x):", "", first, knobs())
    assert shown[view.stepper] is first and len(first.history) == 2
    *_, last = handler("def f(x):", "", first, knobs(gamma=2))
    assert last[view.stepper] is not first and "started over" in status_of(last)
    with pytest.raises(StopIteration):  # the old run was closed, not left holding the models
        next(first.events)
    state, text, stages, _, status = values(tab_stepthrough.reset_handler(view)(last[view.stepper]), view)
    assert state is None and "Back at the start" in status and "Next step" in stages
    with pytest.raises(StopIteration):
        next(last[view.stepper].events)


def test_text_so_far_is_continued_and_the_end_of_the_run_is_said(ctx, views):
    handler, stepper = step_handler(ctx, views.step), None
    for _ in range(10):
        *_, out = handler("Say hi", "Hello", stepper, knobs(max_new_tokens=3, gamma=2))
        stepper = out[views.step.stepper]
        if stepper.finished:
            break
    assert stepper.finished and "Hello" in stepper.context
    *_, after = handler("Say hi", "Hello", stepper, knobs(max_new_tokens=3, gamma=2))
    assert "The run has finished" in status_of(after)


@pytest.mark.parametrize(
    "prompt, changes, message",
    [
        ("  ", {}, "prompt must be non-empty text"),
        ("hi", {"gamma": 0}, "gamma must be an integer in [1, 64], got 0"),
        ("hi", {"top_p": 0}, "top_p must be in (0.0, 1.0], got 0"),
        ("hi", {"drafter": "oracle"}, "drafter must be one of"),
        ("x" * 2100, {}, "the target's context holds 2048"),
    ],
)
def test_step_through_bad_input_is_a_message_naming_the_field(ctx, views, prompt, changes, message):
    handler = step_handler(ctx, views.step)
    raises_in_page(handler(prompt, "", None, knobs(**changes)), message)
    *_, ok = handler("still serving", "", None, knobs())
    assert "Step 1" in status_of(ok)


# -- lockstep: long work that stops when the page says Stop ---------------------------------------


def test_lockstep_streams_reports_returns_the_result_and_raises_errors():
    def work(report):
        for i in range(3):
            report(i)
        return "done"

    runs = lockstep(work)
    assert [next(runs), next(runs), next(runs)] == [(0,), (1,), (2,)]
    with pytest.raises(StopIteration) as finished:
        next(runs)
    assert finished.value.value == "done"
    with pytest.raises(KeyError):
        list(lockstep(lambda report: {}["missing"]))


def test_closing_lockstep_stops_the_worker_at_its_next_report():
    steps, ended = [], threading.Event()

    def work(report):
        try:
            for i in range(1000):
                steps.append(i)
                report(i)
        finally:
            ended.set()

    runs = lockstep(work)
    next(runs), next(runs)
    runs.close()  # what Gradio does on Stop
    assert ended.wait(5) and steps == [0, 1]  # parked at its report: no work ran after Stop


def test_lockstep_throttles_reports_but_always_passes_the_final_one():
    clock = iter(range(100))
    runs = lockstep(
        lambda report: [report(i, final=i == 9) for i in range(10)], every=3, clock=lambda: next(clock)
    )
    assert [r[0] for r in runs][-1] == 9


# -- measured points --------------------------------------------------------------------------------


def point(gamma=4, accepted=6, tested=8, verify_seconds=2.0, session_prompt="p", **kw) -> Point:
    values = dict(
        pair="tiny",
        drafter=MODEL,
        temperature=0.0,
        gamma=gamma,
        speedup=1.5,
        accepted=accepted,
        tested=tested,
        drafted=10,
        draft_seconds=1.0,
        verify_seconds=verify_seconds,
        target_calls=4,
        baseline_calls=10,
        baseline_seconds=5.0,
        prompt=session_prompt,
    )
    return Point(**{**values, **kw})


def test_points_pool_exact_sums_and_fit_the_verification_cost():
    a, b = point(accepted=6, tested=8), point(gamma=2, accepted=1, tested=4, verify_seconds=3.0)
    assert a.alpha == 0.75 and a.c == pytest.approx((1.0 / 10) / (5.0 / 10))
    assert a.verify_cost == pytest.approx((2.0 / 4) / (5.0 / 10))
    pooled = pool([a, b])
    assert pooled.alpha == pytest.approx(7 / 12) and pooled.points == 2
    # v(γ) = 1 + kγ through (4, 1.0) and (2, 1.5): k = (0*4 + 0.5*2) / (16 + 4)
    assert pooled.verify_slope == pytest.approx(0.05)
    assert pool([point(tested=0)]) is None


def test_a_finished_race_becomes_a_point_with_the_same_numbers_as_its_stats(ctx):
    from playground.engine.events import summarize
    from playground.measure.teach.points import point_from_race
    from playground.app.race.frames import race_frames

    settings = RunConfig(pair="tiny", max_new_tokens=24, gamma=3)
    running = []
    for frame in race_frames(ctx.cache.get("tiny"), "def f(x):", "", settings, every=0):
        running.append(point_from_race(frame))  # the same frame object, updated as the race goes
    frames = [frame]
    assert running[0] is None and running[-1] is not None  # a point only once the race is done
    p = point_from_race(frames[-1], "def f")
    spec, base = summarize(frames[-1].speculative.events), summarize(frames[-1].baseline.events)
    assert (p.source, p.gamma, p.pair) == ("race", 3, "tiny") and p.alpha == pytest.approx(spec.alpha)
    assert p.speedup == pytest.approx(spec.tok_s / base.tok_s)
    adaptive = list(
        race_frames(
            ctx.cache.get("tiny"),
            "def f(x):",
            "",
            RunConfig(pair="tiny", max_new_tokens=8, adaptive=True),
            every=0,
        )
    )
    assert point_from_race(adaptive[-1]) is None  # no single γ to put it at


def test_the_store_keeps_sessions_apart_and_stays_bounded():
    store = Measurements(sessions=2, per_session=3)
    for i in range(5):
        store.add("a", point(gamma=i + 1))
    store.add("b", point())
    assert [p.gamma for p in store.get("a")] == [3, 4, 5] and len(store.get("b")) == 1
    store.add("c", point())
    assert store.get("a") == [] and store.get("c")  # the least recently used session was dropped


# -- theory vs measurement ---------------------------------------------------------------------------


def test_measure_now_adds_a_point_for_this_session_and_the_curve_uses_it(views):
    ctx, view = build_context(), views.theory
    request = SimpleNamespace(session_hash="me")
    form = tab_theory.MeasureForm("def fib(n):", "tiny", MODEL, 0.0, 4, 24, session=request.session_hash)
    outputs = list(tab_theory.handle(ctx, view, form))
    figure, explain, table, tree_figure, status = values(outputs[-1], view)
    assert any("Measuring" in status_of(o) for o in outputs[:-1])  # progress was streamed
    assert "Measured at γ = 4" in status and len(table) == 1 and table[0][2] == 4
    assert "Recommended γ" in explain and "acceptance rate" in explain and "verification cost" in explain
    names = [t.name for t in figure.data]
    assert names[0].startswith("formula: α =") and "measured here" in names
    assert any("recommended γ" in a.text for a in figure.layout.annotations)
    # the draft model also grew a tree: its measured length beside the chain's, and both curves
    tree_names = [t.name for t in tree_figure.data]
    assert tree_names[0].startswith("chain of n nodes") and tree_names[1].startswith("best tree of n nodes")
    best, capped = (list(t.y) for t in tree_figure.data[1:3])
    assert all(d <= b + 1e-9 for d, b in zip(capped, best)) and "levels deep" in tree_names[2]
    (point,) = ctx.measurements.get("me")
    assert point.tree_calls > 0 and point.rank_trials[0] > 0 and point.tree_shape[0] == RunConfig().tree_budget
    measured_tree = next(t for t in tree_figure.data if t.name == "trees measured here")
    assert list(measured_tree.y) == [pytest.approx(point.tree_tokens_per_call)]
    assert len(ctx.measurements.get("me")) == 1 and ctx.measurements.get("someone else") == []
    redraw = tab_theory.redraw_handler(ctx, view)
    elsewhere = redraw("tiny", MODEL, 0.0, "", SimpleNamespace(session_hash="someone else"))
    assert view.status not in elsewhere  # a redraw leaves the status as it is
    assert "No measurement yet" in elsewhere[view.explain] and "illustration" in elsewhere[view.plot].data[0].name
    other_t = redraw("tiny", MODEL, 0.7, "", request)
    assert "No measurement yet" in other_t[view.explain]  # α depends on the temperature: points are not mixed


def test_a_point_measured_with_another_draft_model_is_drawn_for_that_draft_only(views):
    """The draft model is a knob here too (issue 27): the tiny target drafting for itself keeps every
    token (greedy α = 1), and its point is not pooled with the pair's own draft's."""
    ctx, view = build_context(), views.theory
    request = SimpleNamespace(session_hash="drafts")
    form = tab_theory.MeasureForm("def fib(n):", "tiny", MODEL, 0.0, 3, 16, "tiny-target", session="drafts")
    outputs = list(tab_theory.handle(ctx, view, form))
    assert "Measured at γ = 3" in status_of(outputs[-1])
    (point,) = ctx.measurements.get("drafts")
    assert point.draft == "tiny-target" and point.alpha == 1.0
    redraw = tab_theory.redraw_handler(ctx, view)
    assert "No measurement yet" in redraw("tiny", MODEL, 0.0, "", request)[view.explain]
    drawn = redraw("tiny", MODEL, 0.0, "tiny-target", request)
    assert "drafted by tiny-target" in drawn[view.explain] and len(drawn[view.table]) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (("", "tiny", MODEL, 0.0, 4, 24), "prompt must be non-empty text"),
        (
            ("hi", "tiny", MODEL, 0.0, 4, 0),
            "new tokens per run must be a whole number in [1, 256], got 0",
        ),
        (("hi", "tiny", MODEL, 0.0, 99, 24), "gamma must be an integer in [1, 64], got 99"),
        (("hi", "nope", MODEL, 0.0, 4, 24), "unknown pair 'nope'"),
        (("hi", "tiny", MODEL, 0.0, 4, 24, "nope"), "draft must be a model in"),
    ],
)
def test_measure_bad_input_is_a_message_naming_the_field(ctx, views, args, message):
    raises_in_page(tab_theory.handle(ctx, views.theory, tab_theory.MeasureForm(*args)), message)


def test_theory_panel_explains_alpha_c_and_the_assumptions_before_any_measurement():
    page = html.unescape(theory.explain_html([], None, "tiny"))
    assert "No measurement yet" in page and "(1 − α^(γ+1)) / ((1 − α)(γc + v(γ+1)))" in page
    assert "The paper takes v = 1" in page and "here v is measured" in page


# -- losslessness lab ------------------------------------------------------------------------------


class FixedPair:
    """A pair cache that always hands out the same pair (here: two unrelated tiny models, so the
    draft often disagrees with the target and every branch of Algorithm 1 fires)."""

    def __init__(self, pair):
        self.pair = pair

    def get(self, *args, progress=None, **kwargs):
        return self.pair


@pytest.fixture(scope="module")
def disagreeing_ctx(ctx):
    from playground.models.tiny import byte_tokenizer, tiny_model

    tokenizer = byte_tokenizer()
    target = tiny_model(len(tokenizer), 2, seed=11, logit_scale=0.3)
    draft = tiny_model(len(tokenizer), 1, seed=12, logit_scale=0.3)
    pair = SimpleNamespace(
        tokenizer=tokenizer,
        target=SimpleNamespace(model=target),
        draft=SimpleNamespace(model=draft),
        random_weights=True,
        same_tokenizer=True,
    )
    return AppContext(ctx.registry, FixedPair(pair))


LAB = ("Once upon a time", "tiny")


def lab_handler(ctx, views):
    """The Draw slowly handler as a function of the fields, in the page's order."""
    return lambda *values: tab_lab.handle(ctx, views.lab, tab_lab.LabForm(*values))


def slow_values(output: dict, views) -> tuple:
    """The slow lab's redraw as its API returns it: figure, verdict, status."""
    return tuple(output.get(c) for c in views.lab.slow())


def test_lab_reports_no_difference_on_the_engine_with_a_progress_bar(disagreeing_ctx, views):
    outputs = list(lab_handler(disagreeing_ctx, views)(*LAB, 1000, 1.0, 0, 1.0, 0))
    assert all(set(o) <= set(views.lab.slow()) for o in outputs)  # never the fast lab's convergence plot
    figure, verdict, status = slow_values(outputs[-1], views)
    assert any("Drawing:" in status_of(o) for o in outputs[:-1])
    assert "No detectable difference at 1000 draws" in html.unescape(verdict)
    assert "The draft's own guess was kept in" in verdict and "Done: 1000 draws each way" in status
    assert [t.name for t in figure.data][:2] == ["speculative", "exact p"]


def test_lab_alarms_when_the_acceptance_rule_is_broken(disagreeing_ctx, views, monkeypatch):
    def wrong(p, q, tokens):  # q/p instead of p/q: accepts what the draft over-proposes
        rows = torch.arange(tokens.shape[0])
        return (q[rows, tokens] / p[rows, tokens]).clamp(max=1.0)

    monkeypatch.setattr(sampling, "acceptance_probs", wrong)
    *_, last = lab_handler(disagreeing_ctx, views)(*LAB, 1000, 1.0, 0, 1.0, 0)
    figure, verdict, status = slow_values(last, views)
    assert "Significant difference at 1000 draws" in verdict and "the engine is broken" in verdict


def test_lab_runs_on_the_tiny_pair_from_the_registry(ctx, views):
    *_, last = lab_handler(ctx, views)("def", "tiny", 200, 0.8, 20, 0.9, 3)
    figure, verdict, status = slow_values(last, views)
    assert "No detectable difference at 200 draws" in html.unescape(verdict) and "Random-weight" in status


@pytest.mark.parametrize(
    "draws, changes, message",
    [
        (0, {}, "N draws must be a whole number in [1, 20000], got 0"),
        (10**9, {}, "N draws must be a whole number in [1, 20000], got 1000000000"),
        (2.5, {}, "N draws must be a whole number in [1, 20000], got 2.5"),
        (None, {}, "N draws must be a whole number"),
        (10, {"temperature": 0}, "temperature must be above 0 for the lab"),
        (10, {"top_p": 1.5}, "top_p must be in (0.0, 1.0], got 1.5"),
    ],
)
def test_lab_bad_input_is_a_message_naming_the_field(ctx, views, draws, changes, message):
    given = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, **changes}
    raises_in_page(lab_handler(ctx, views)("hi", "tiny", draws, *given.values()), message)


def forward_calls(model) -> list:
    """A list that grows by one per forward of `model`: work measured in model calls, not seconds."""
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    return calls, hook


def join_workers(before: set) -> None:
    """Wait until the lockstep workers started since `before` have ended (a guard against a hang,
    not a speed limit: the test's assertions are about how much work was done)."""
    for thread in set(threading.enumerate()) - before:
        if thread.name == "lockstep-worker":
            thread.join(timeout=600)
            assert not thread.is_alive(), "the worker never stopped"


def test_stopping_the_lab_stops_drawing(disagreeing_ctx, views):
    calls, hook = forward_calls(disagreeing_ctx.cache.pair.target.model)
    before = set(threading.enumerate())
    runs = lab_handler(disagreeing_ctx, views)(*LAB, 20_000, 1.0, 0, 1.0, 0)
    shown = next(status_of(o) for o in runs if "Drawing:" in status_of(o))
    runs.close()  # Gradio's Stop
    at_stop = len(calls)
    join_workers(before)
    hook.remove()
    assert "of 20000" in shown
    # The worker stops at its next report: far fewer target calls than the 20,000 draws need.
    assert len(calls) - at_stop <= max(at_stop, 50), (at_stop, len(calls))


# -- sweep ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, text, expected",
    [
        ("gamma", "1,2,4", [1, 2, 4]),
        ("gamma", "1-3, 8", [1, 2, 3, 8]),
        ("gamma", "2,2,1", [2, 1]),
        ("temperature", "0, 0.7", [0.0, 0.7]),
    ],
)
def test_grid_values_parse(key, text, expected):
    assert sweep.parse_values(key, text) == expected


def plan_args(**changes):
    values = dict(pair="tiny", gammas="1,2", drafters=(MODEL,), temperatures="0", examples=("Code",), categories=(),
                  per_category=1, tokens=16, repeats=1, seed=0)
    return sweep_form.SweepForm(**{**values, **changes})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"gammas": ""}, "γ values: give at least one value"),
        ({"gammas": "1,x"}, "γ values: gamma takes integers or ranges like 1-8, separated by commas, got 'x'"),
        ({"gammas": "0,2"}, "γ values: gamma must be an integer in [1, 64], got 0"),
        ({"gammas": "1-500"}, "γ values: gamma: a range runs from low to high over at most 64 steps"),
        ({"temperatures": "-1"}, "temperatures: temperature must be in [0.0, 2.0], got -1.0"),
        ({"drafters": ()}, "drafters: choose at least one"),
        ({"drafters": ("magic",)}, "drafters: unknown 'magic'; choose from model, prompt_lookup, suffix, recycling, "
                                   "self, hybrid, tree"),
        ({"examples": (), "categories": ()}, "prompts: choose at least one example or Spec-Bench category"),
        ({"categories": ("nope",)}, "Spec-Bench categories: unknown category nope"),
        ({"categories": ("coding",), "per_category": 0}, "prompts per category must be a whole number in [1, 20]"),
        ({"tokens": 0}, "max_new_tokens must be an integer in [1, 4096], got 0"),
        ({"seed": -1}, "seed must be an integer in [0, 9223372036854775807], got -1"),  # the knob's range
        ({"repeats": 11}, "repeats must be a whole number in [1, 10], got 11"),
        ({"drafts": "beta=1"}, "draft settings: expected KEY=V1,V2,... with KEY one of ngram_min, ngram_max"),
        ({"drafts": "gamma=1,2"}, "draft settings: expected KEY=V1,V2,..."),
        ({"drafts": "draft_vocab=-1"}, "draft settings: draft_vocab must be an integer in [0, "),
        ({"drafts": "ngram_min=4"}, "draft settings: ngram_max must be an integer in [4, 32], got 3"),
        ({"gammas": "1-40", "temperatures": "0,0.5,1", "categories": ("coding", "translation"), "per_category": 3},
         "grid: 120 settings × 7 prompts = 840 measurements, more than 400"),
    ],
)
def test_bad_grids_are_refused_naming_the_field(changes, message):
    with pytest.raises(ValueError) as raised:
        sweep_form.plan_of(plan_args(**changes))
    assert message in str(raised.value)


def test_the_page_and_the_benchmark_plan_the_same_cells():
    """The page's fields and the benchmark's --sweep are one grammar: the same grid, the same cells."""
    from playground.measure.bench import cli

    page = sweep_form.plan_of(plan_args(drafters=(MODEL, PROMPT_LOOKUP), gammas="1-2", drafts="ngram_max=2,3"))
    args = cli.build_parser().parse_args(["--pair", "tiny", "--max-new-tokens", "16", "--draft-vocab", "0",
                                          "--sweep", "drafter=model,prompt_lookup", "temperature=0", "gamma=1-2",
                                          "ngram_max=2,3"])
    args.argv = []
    assert cli.make_plan(args).cells == page.cells and len(page.cells) == 8


@pytest.fixture(scope="module")
def sweep_view(ctx):
    """The Sweep tab's outputs, as the tab builds them (the handler's dicts are keyed by these)."""
    with gr.Blocks():
        return tab_sweep.build(ctx)["view"]


def run_sweep(ctx, view, *values, session: str | None = None):
    """The Run handler on the page's fields, in the page's order, as `session` sends them."""
    return tab_sweep.handle(ctx, view, sweep_form.SweepForm(*values, session=session))


def last_of(outputs) -> dict:
    """Every component's latest value over a handler's redraws."""
    final = {}
    for o in outputs:
        final.update(o)
    return final


def test_sweep_fills_the_table_plots_files_and_the_theory_points(ctx, sweep_view):
    view = sweep_view
    outputs, read = [], {}
    for o in run_sweep(ctx, view, "tiny", "1,3", [MODEL, PROMPT_LOOKUP], "0", ["Code"], [], 1, 12, 1, 0, "",
                       session="sweeper"):
        outputs.append(o)
        if o.get(view.files):  # the files, read as Gradio does: before the handler resumes
            read = {path: Path(path).read_text() for path in o[view.files]}
    final = last_of(outputs)
    table, speedup, files, status, fastest = (final[c] for c in (view.table, view.speedup, view.files,
                                                                  view.status, view.fastest))
    assert "Done: 4 settings measured" in status and "is in the Export tab" in status
    assert [row[:4] for row in table] == [
        [MODEL, "", 0.0, 1],
        [MODEL, "", 0.0, 3],
        [PROMPT_LOOKUP, "", 0.0, 1],
        [PROMPT_LOOKUP, "", 0.0, 3],
    ]
    speeds = [row[COLUMNS.index("speculative_tok_s")] for row in table]
    best = table[speeds.index(max(speeds))]
    assert (fastest["drafter"], fastest["gamma"], fastest["max_new_tokens"]) == (best[0], best[3], 12)
    assert {t.name for t in speedup.data} == {"draft model, T = 0", "prompt lookup, T = 0"}
    assert sum(1 for o in outputs if "Ran " in status_of(o)) >= 8  # progress after every run
    csv_path, json_path = files
    assert not Path(csv_path).parent.exists()  # every sweep's temp folder is removed once it is sent
    rows = [r for r in csv.DictReader(read[csv_path].splitlines()) if r["row"] == "overall"]
    assert len(rows) == 4 and rows[0]["gamma"] == "1" and float(rows[0]["speedup"]) > 0
    report = json.loads(read[json_path])  # the benchmark's report: its charts and console read it too
    assert report["schema"] == SCHEMA and len(report["runs"]) == 4 and report["runs"][0]["prompts"]
    assert report["config"]["sweep"] == ["drafter=model,prompt_lookup", "temperature=0.0", "gamma=1,3"]
    assert [r["summary"]["speculative_tok_s"] for r in report["runs"]] == pytest.approx(speeds, abs=1e-3)
    assert len(ctx.measurements.get("sweeper")) == 4


def test_sweep_tree_rows_sweep_the_depth_and_reproduce_greedy_output(ctx, sweep_view):
    from playground.engine import factory
    from playground.engine.tree_drafter import TreeDrafter

    plan = sweep_form.plan_of(plan_args(drafters=(sweep.TREE,), gammas="3"), builtin={"Code": "x"})
    built = factory.make_drafter(plan.cells[0], factory.Models.of(ctx.cache.get("tiny")))
    assert isinstance(built, TreeDrafter) and built.depth == 3
    view = sweep_view
    final = last_of(run_sweep(ctx, view, "tiny", "2,3", [MODEL, sweep.TREE], "0", ["Code"], [], 1, 12, 1, 0,
                              "", session="trees"))
    table, speedup = final[view.table], final[view.speedup]
    trees = [row for row in table if row[0] == sweep.TREE]
    assert [row[3] for row in trees] == [2, 3] and all(row[COLUMNS.index("identical")] for row in trees)
    assert all(row[COLUMNS.index("tokens_per_call")] >= 1 for row in trees)
    assert {t.name for t in speedup.data} == {"draft model, T = 0", "draft tree (γ = depth), T = 0"}


def test_sweep_compares_drafts_and_each_row_builds_the_drafter_it_names(ctx, sweep_view, monkeypatch):
    """Draft settings as rows (issue 12): n-gram sizes and draft vocabularies, in the benchmark's
    --sweep grammar. Asserted on the drafters the timed runs actually built."""
    from playground.engine import factory
    from playground.config import PROMPT_LOOKUP
    from playground.engine.drafters import ModelDrafter, PromptLookupDrafter

    built = []
    make = factory.make_drafter
    monkeypatch.setattr(factory, "make_drafter", lambda run, draft: built.append(make(run, draft)) or built[-1])
    view = sweep_view
    final = last_of(run_sweep(ctx, view, "tiny", "2", [MODEL, PROMPT_LOOKUP], "0", ["Code"], [], 1, 12, 1, 0,
                              "draft_vocab=100,120 ngram_max=2,3", session="drafts"))
    table, speedup, fastest = final[view.table], final[view.speedup], final[view.fastest]
    drafts = [(row[0], row[1]) for row in table]
    assert drafts == [(d, f"draft_vocab={v} ngram_max={n}") for d in (MODEL, PROMPT_LOOKUP)
                      for v in (100, 120) for n in (2, 3)]
    assert {d.lm.head_rows for d in built if isinstance(d, ModelDrafter)} == {100, 120}
    assert {(d.min_ngram, d.max_ngram) for d in built if isinstance(d, PromptLookupDrafter)} == {(1, 2), (1, 3)}
    assert all(row[COLUMNS.index("identical")] for row in table)  # greedy: lossless for every draft
    assert "draft model, draft_vocab=100 ngram_max=2, T = 0" in {t.name for t in speedup.data}
    assert fastest["draft_vocab"] in (100, 120) and fastest["ngram_max"] in (2, 3)


def test_sweep_rows_per_draft_model_each_run_on_the_draft_it_names(ctx, sweep_view):
    """Draft models as rows (issue 27): the pair's own draft and the tiny target drafting for itself,
    each loaded once (the draft varies slowest); a drafter without a model is one row, not one per
    draft; the target as its own draft agrees with itself every time (greedy α = 1)."""
    plan = sweep_form.plan_of(plan_args(drafters=(MODEL, PROMPT_LOOKUP), gammas="2",
                                        draft_models=("", "tiny-target")))
    assert [(c.draft, c.drafter) for c in plan.cells] == [("", MODEL), ("", PROMPT_LOOKUP), ("tiny-target", MODEL)]
    final = last_of(run_sweep(ctx, sweep_view, "tiny", "2", [MODEL, PROMPT_LOOKUP], "0", ["Code"], [], 1, 12, 1, 0,
                              "", ["", "tiny-target"], session="draft-models"))
    table = final[sweep_view.table]
    assert [(row[0], row[1]) for row in table] == [(MODEL, "draft=the pair's"), (PROMPT_LOOKUP, "draft=the pair's"),
                                                   (MODEL, "draft=tiny-target")]
    alphas = [row[COLUMNS.index("alpha")] for row in table]
    assert alphas[2] == 1.0 and alphas[0] < 1.0
    assert all(row[COLUMNS.index("identical")] for row in table)
    raises_in_page(run_sweep(ctx, sweep_view, "tiny", "2", [MODEL], "0", ["Code"], [], 1, 12, 1, 0, "", ["nope"]),
                   "draft models: unknown model 'nope'")


def test_the_sweeps_fastest_row_becomes_the_export_tabs_settings():
    """Tabs never import each other: build_demo wires the Sweep's fastest row to the Export's knobs."""
    from playground.app.demo import build_demo, tab_export

    run = {**{n: getattr(RunConfig(), n) for n in RunConfig.names()}, "pair": "tiny", "gamma": 7}
    values = tab_export.take(run)
    assert values[RunConfig.names().index("gamma")] == 7 and len(values) == len(RunConfig.names())
    assert all(v == gr.skip() for v in tab_export.take(None))
    demo = build_demo(default_pair="tiny")
    wires = [d for d in demo.fns.values() if d.fn is tab_export.take]
    # the Sweep's wire is the one whose input (its fastest row) feeds nothing else; the Drafts tab's
    # winner feeds two (to Export and to the Race: tests/app/board)
    (wire,) = [d for d in wires if sum(w.inputs[0]._id == d.inputs[0]._id for w in wires) == 1]
    assert [o._id for o in wire.outputs] == [c._id for c in wire.outputs if c.elem_id.startswith("ex-")]
    assert {o.elem_id for o in wire.outputs} == {f"ex-{n}" for n in RunConfig.names()}


def test_sweep_bad_input_is_a_message_and_stop_ends_it(ctx, sweep_view):
    raises_in_page(
        run_sweep(ctx, sweep_view, "tiny", "", [MODEL], "0", ["Code"], [], 1, 12, 1, 0), "γ values"
    )
    calls, hook = forward_calls(ctx.cache.get("tiny").target.model)
    before = set(threading.enumerate())
    runs = run_sweep(ctx, sweep_view, "tiny", "1-16", [MODEL], "0", ["Code"], [], 1, 64, 1, 0)
    for o in runs:
        if "Ran " in status_of(o):
            break
    runs.close()
    at_stop = len(calls)
    join_workers(before)
    hook.remove()
    # 16 settings x (warm-up + prompt) x 64 tokens would be over a thousand target calls; the sweep
    # stops within the run in progress when Stop came.
    assert len(calls) - at_stop <= max(at_stop, 200), (at_stop, len(calls))


# -- export (the tab's handler; the snippets themselves are tested in test_export.py) ---------------


def test_export_tab_turns_the_knobs_into_snippets_and_says_a_bad_knob(ctx, views):
    handler = tab_export.export_handler(ctx, views.export)
    notes, serve, python, llama, transformers = values(handler(knobs(gamma=6, temperature=0.7)), views.export)
    assert (
        '"num_speculative_tokens": 6' in serve
        and "llama-server" in llama
        and "assistant_model=draft" in transformers
    )
    assert "random weights" in notes and "Checked against" in notes
    bad = handler(knobs(gamma=0))
    assert list(bad) == [views.export.notes]  # the snippets stay as they were
    assert "gamma must be an integer in [1, 64], got 0" in bad[views.export.notes]


# -- through the launched app: sessions are kept apart --------------------------------------------


def test_through_the_app_each_session_has_its_own_paused_run_and_points():
    import socket

    from gradio_client import Client

    from playground.app.demo import build_demo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = build_demo(default_pair="tiny")
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        a, b = (Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False) for _ in range(2))
        for _ in range(2):
            *_, status_a = a.predict("def f(x):", "", *knobs().values(), api_name="/step")
        *_, status_b = b.predict("def f(x):", "", *knobs().values(), api_name="/step")
        assert "Step 2:" in status_a and "Step 1:" in status_b  # each client its own gr.State
        assert "Back at the start" in a.predict(api_name="/step_reset")[-1]
        assert "Step 1:" in a.predict("def f(x):", "", *knobs().values(), api_name="/step")[-1]
        table_a = a.predict("hi", "tiny", MODEL, 0.0, 4, 8, api_name="/measure")[2]
        table_b = b.predict("hi", "tiny", MODEL, 0.0, 4, 8, api_name="/measure")[2]
        assert len(table_a["data"]) == len(table_b["data"]) == 1  # points are per session
    finally:
        demo.close()
