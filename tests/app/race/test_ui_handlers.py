"""The UI without a browser: renderers and plots as pure functions of events, and the Race
handler called directly on the tiny random pair (no download)."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, TARGET, DraftToken, StepEvent
from playground.app.shared import render
from playground.app.shared.context import build_context
from playground.app.race import plots
from playground.measure.bench.race import interleave
from playground.config import PROMPT_LOOKUP, RunConfig
from playground.app.race import tab as tab_race
from playground.app.race.tab import RaceForm, handle
from playground.app.shared.flow import outputs as outputs_of

FATES = {ACCEPTED, REJECTED, RESAMPLED, BONUS}


def step(
    drafts=(), n_accepted=0, next_token=9, next_fate=TARGET, emitted=None, seconds=0.01, index=0, finish=None
):
    """A hand-made StepEvent: drafts are (token, q, p, accept_prob, uniform)."""
    tokens = tuple(
        DraftToken(t, q, p, a, u, ACCEPTED if i < n_accepted else REJECTED)
        for i, (t, q, p, a, u) in enumerate(drafts)
    )
    if emitted is None:
        emitted = tuple(d.token for d in tokens[:n_accepted]) + (next_token,)
    return StepEvent(
        index,
        len(drafts),
        tokens,
        n_accepted,
        next_token,
        next_fate,
        0.5,
        emitted,
        0.0,
        seconds / 2,
        seconds / 2,
        0.0,
        finish,
    )


def builder(texts: dict[int, str], special=()):
    return render.SpanBuilder(lambda t: texts[t], lambda t: texts[t], special=special)


# -- rendering --------------------------------------------------------------------------------


def test_rejected_drafts_sit_struck_through_before_the_token_that_replaced_them():
    texts = {1: "def", 2: " f", 3: "(x", 4: "[y", 5: "(z"}
    b = builder(texts)
    b.add(
        step(
            [
                (1, 0.9, 0.8, 0.889, 0.2),
                (2, 0.7, 0.6, 0.857, 0.5),
                (3, 0.6, 0.1, 0.167, 0.9),
                (4, 0.5, 0.1, 0.2, None),
            ],
            n_accepted=2,
            next_token=5,
            next_fate=RESAMPLED,
        )
    )
    page = render.render_spans(b.spans)
    assert [s.fate for s in b.spans] == [ACCEPTED, ACCEPTED, REJECTED, REJECTED, RESAMPLED]
    assert [s.text for s in b.spans] == ["def", " f", "(x", "[y", "(z"]
    assert page.index('class="tok rejected"') < page.index('class="tok resampled"')
    rejected = b.spans[2].tip
    assert "p(x) = 0.100" in rejected and "q(x) = 0.600" in rejected
    assert "min(1, p/q) = 0.167" in rejected and "u = 0.900" in rejected
    assert "unread" in b.spans[3].tip  # after the first rejection nothing is tested
    assert "norm(max(0, p - q))" in b.spans[4].tip


def test_full_acceptance_ends_with_a_bonus_and_baseline_tokens_are_target_tokens():
    b = builder({1: "a", 2: "b", 3: "c"})
    b.add(
        step([(1, 0.5, 0.6, 1.0, 0.3), (2, 0.5, 0.5, 1.0, 0.7)], n_accepted=2, next_token=3, next_fate=BONUS)
    )
    assert [s.fate for s in b.spans] == [ACCEPTED, ACCEPTED, BONUS]
    base = builder({3: "c"})
    base.add(step(next_token=3, next_fate=TARGET))
    assert [s.fate for s in base.spans] == [TARGET]


def test_greedy_tooltips_explain_the_argmax_rule():
    b = builder({1: "a", 2: "b", 3: "c"})
    b.add(
        step(
            [(1, 0.5, 0.6, 1.0, None), (2, 0.5, 0.2, 0.0, None)],
            n_accepted=1,
            next_token=3,
            next_fate=RESAMPLED,
        )
    )
    assert "greedy" in b.spans[0].tip and "matches the target's top token" in b.spans[0].tip
    assert "differs from the target's top token" in b.spans[1].tip


def test_the_hybrids_tooltips_say_which_source_drafted_the_step_and_why():
    b = builder({1: "a", 2: "b", 3: "c"})
    why = "3 from the suffixes (a 9-token match): α 0.90, 3.44 tokens expected for 60.0 ms, the most per second"
    b.add(replace(step([(1, 1.0, 0.6, 0.6, 0.2), (2, 1.0, 0.5, 0.5, 0.7)], n_accepted=1, next_token=3,
                       next_fate=RESAMPLED), source="suffixes", why=why))
    assert all(f"the hybrid drafted {why}" in s.tip for s in b.spans)
    plain = builder({3: "c"})
    plain.add(step(next_token=3))
    assert "hybrid" not in plain.spans[0].tip


def test_token_text_is_escaped_and_whitespace_kept():
    evil = '<script>alert(1)</script>"&<b>'
    b = builder({1: evil, 2: "\n    return x\t", 3: "<img src=x onerror=alert(1)>"})
    b.add(step([(3, 0.5, 0.1, 0.2, 0.9)], n_accepted=0, next_token=1, next_fate=RESAMPLED))
    b.add(step(next_token=2))
    page = render.render_spans(b.spans)
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;&lt;b&gt;" in page
    assert "\n    return x\t" in page  # shown as is; the box's CSS keeps it (pre-wrap, monospace)
    assert "white-space: pre-wrap" in render.CSS and "monospace" in render.CSS


def test_special_tokens_are_shown_discreetly():
    b = builder({7: "", 258: "<|im_end|>"}, special={258})
    b.add(step(next_token=258, finish="eos"))
    page = render.render_spans(b.spans)
    assert 'class="tok special"' in page and "&lt;|im_end|&gt;" in page


def test_legend_names_every_fate():
    legend = render.legend_html()
    for fate in (ACCEPTED, REJECTED, RESAMPLED, BONUS, TARGET):
        assert f'class="tok {fate}"' in legend


# -- timing and plots ---------------------------------------------------------------------------


def test_interleave_advances_the_run_whose_clock_is_behind_and_closing_stops_both():
    closed = []

    def run(name, seconds):
        try:
            for s in seconds:
                yield step(seconds=s)
        finally:
            closed.append(name)

    order = [name for name, _ in interleave({"a": run("a", [1.0, 1.0, 1.0]), "b": run("b", [0.4] * 6)})]
    # a:0->1; b catches up in 0.4 steps (0.4, 0.8, 1.2); then a (1->2); b to 1.6, 2.0; a (2->3); b to 2.4
    assert order == ["a", "b", "b", "b", "a", "b", "b", "a", "b"]
    race = interleave({"a": run("a", [1.0] * 100), "b": run("b", [1.0] * 100)})
    next(race), next(race)  # both started
    closed.clear()
    race.close()  # what Gradio does on Stop
    assert sorted(closed) == ["a", "b"]


def test_plots_follow_each_runs_own_clock_and_end_at_the_measured_speedup():
    base = [step(seconds=0.1) for _ in range(10)]  # 10 tokens in 1.0 s
    spec = [
        step([(1, 0.5, 0.5, 1.0, 0.1)] * 3, n_accepted=3, next_fate=BONUS, seconds=0.2) for _ in range(2)
    ]  # 8 in 0.4 s
    tokens = plots.tokens_over_time(base, spec)
    assert [tr.name for tr in tokens.data] == ["autoregressive", "speculative"]
    assert tokens.data[0].y[-1] == 10 and tokens.data[1].y[-1] == 8
    assert tokens.data[1].x[-1] == pytest.approx(0.4)
    x, y = plots.speedup_curve(base, spec)
    assert x[-1] == pytest.approx(1.0) and y[-1] == pytest.approx((8 / 0.4) / (10 / 1.0))
    assert plots.speedup_curve(base, []) == ([], [])
    accept = plots.acceptance_by_position_figure(spec, alpha=1.0)
    assert list(accept.data[0].y) == [1.0, 1.0, 1.0]


# -- the handler on the tiny pair ---------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx():
    ctx = build_context()
    ctx.frame_every = 0.0  # a frame per step, so streaming is visible even on a fast machine
    return ctx


@pytest.fixture(scope="module")
def view(ctx):
    """The Race tab's outputs, as the tab builds them (the handler's dicts are keyed by these)."""
    with gr.Blocks():
        return tab_race.build(ctx)["view"]


def knobs(**changes) -> dict:
    settings = RunConfig(pair="tiny", max_new_tokens=40)
    return {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}


def race(ctx, view, prompt: str, system: str = "", session: str | None = None, **changes):
    """The Run handler on a form filled as the page would, with the knobs of knobs(**changes)."""
    return handle(ctx, view, RaceForm(prompt, system, knobs(**changes), session=session))


def frames(outputs, view) -> list[dict]:
    """The outputs that redraw the race (not status-only updates)."""
    return [o for o in outputs if view.baseline in o]


def classes(page: str) -> set[str]:
    return set(re.findall(r'class="tok (\w+)"', page))


def test_race_streams_coloured_text_plots_and_stats(ctx, view):
    outputs = list(race(ctx, view, "def fibonacci(n):", gamma=4))
    every = set(outputs_of(view))
    assert all(set(o) <= every and view.status in o for o in outputs)  # keyed by the view's components
    shown = frames(outputs, view)
    assert len(shown) >= 5, "the race should stream, not arrive in one piece"
    assert all(set(o) == every for o in shown)  # a frame redraws everything
    counts = [int(re.search(r"(\d+) tokens", f[view.speculative]).group(1)) for f in shown]
    assert counts == sorted(counts) and counts[0] < counts[-1] == 40
    baseline, speculative, fig_tokens, fig_speedup, fig_accept, stats, status = (shown[-1][c] for c in outputs_of(view))
    assert classes(baseline) - {render.SPECIAL} == {TARGET}
    assert FATES <= classes(speculative), classes(speculative)
    assert len(fig_tokens.data) == 2 and len(fig_speedup.data[0].x) > 0 and len(fig_accept.data[0].y) > 0
    assert "identical to the baseline" in stats and "α" in stats and "predicted speedup" in stats
    assert "Done" in status and "Random-weight pair" in status


def test_sampled_race_says_texts_differ_by_chance(ctx, view):
    *_, last = race(ctx, view, "Once upon a time", temperature=0.9, top_p=0.9, seed=3)
    assert "sampled (temperature 0.9)" in last[view.stats]


def test_draft_vocabulary_knob_reaches_the_drafter(ctx, view):
    *_, last = race(ctx, view, "def fibonacci(n):", gamma=4, draft_vocab=120)
    assert "identical to the baseline" in last[view.stats] and "Done" in last[view.status]


def test_prompt_lookup_race_runs(ctx, view):
    prompt = "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\n" * 3
    *_, last = race(ctx, view, prompt, "be brief", drafter=PROMPT_LOOKUP, gamma=6, ngram_max=4)
    assert "prompt lookup proposes" in last[view.speculative] and "identical to the baseline" in last[view.stats]


REPEATS = "def add(a, b):\n    return a + b\n\n" * 4  # copied spans: what model-free drafters catch


@pytest.mark.parametrize("changes", [
    dict(drafter="suffix"), dict(drafter="suffix", speculation="tree"), dict(drafter="recycling"),
    dict(drafter="recycling", speculation="tree"), dict(drafter="self", kept_layers=2), dict(drafter="hybrid"),
], ids=lambda c: "-".join(map(str, c.values())))
def test_every_drafter_races_to_the_baselines_text_and_shows_what_it_holds(ctx, view, changes):
    *_, last = race(ctx, view, REPEATS, gamma=4, **changes)
    assert "identical to the baseline" in last[view.stats] and "Done" in last[view.status], last[view.stats]
    base_mb, spec_mb = (float(x.replace(",", "")) for x in
                        re.search(r"weights MB \(counted\)</td><td>([\d,.]+)</td><td>([\d,.]+)", last[view.stats]).groups())
    # the hybrid holds a draft model's weights beside the target's; self-drafting only a cache of a
    # few layers (the tiny pair's suffix index, Python objects, can outweigh its 0.3 MB draft)
    from playground.engine.memory import model_bytes

    draft_mb, extra = model_bytes(ctx.cache.get("tiny").draft.model) / 2**20, spec_mb - base_mb
    assert extra >= 0 and (extra >= draft_mb - 0.1 if changes["drafter"] == "hybrid" else True), (extra, draft_mb)
    assert extra < draft_mb or changes["drafter"] != "self", (extra, draft_mb)


def target_calls(stats: str) -> int:
    return int(re.search(r"target calls</td><td>\d+</td><td>(\d+)", stats).group(1))


@pytest.mark.parametrize("drafter", ["suffix", "recycling"])
def test_a_learning_drafter_keeps_what_it_learned_across_the_sessions_races(ctx, view, drafter):
    """Suffix decoding indexes the session's earlier answers, token recycling keeps its table: the
    same prompt raced again needs fewer target calls; another session starts from nothing."""
    calls = []
    for session in ("learns", "learns", "fresh"):
        *_, last = race(ctx, view, "def fibonacci(n):", session=session, drafter=drafter, gamma=4)
        assert "identical to the baseline" in last[view.stats]
        calls.append(target_calls(last[view.stats]))
    assert calls[1] < calls[0] == calls[2], calls


@pytest.mark.parametrize(
    "prompt, changes, message",
    [
        ("   ", {}, "prompt must be non-empty text"),
        ("hi", {"max_new_tokens": 0}, "max_new_tokens must be an integer in [1, 4096], got 0"),
        ("hi", {"max_new_tokens": 10**9}, "max_new_tokens must be an integer in [1, 4096]"),
        ("hi", {"gamma": 0}, "gamma must be an integer in [1, 64], got 0"),
        ("hi", {"gamma": 2.5}, "gamma must be an integer, got 2.5"),
        ("hi", {"top_p": 0}, "top_p must be in (0.0, 1.0], got 0"),
        ("hi", {"pair": "nope"}, "unknown pair 'nope'"),
        ("hi", {"drafter": "oracle"}, "drafter must be one of"),
        ("hi", {"draft_vocab": -1}, "draft_vocab must be an integer in [0, 10000000], got -1"),
        ("hi", {"draft_vocab": 10**6}, "draft_vocab must be in [1, "),
        ("hi", {"draft": "nope"}, "draft must be a model in"),
        ("hi", {"drafter": "self", "kept_layers": 9}, "kept_layers must be an integer in [1, 3], got 9"),
        ("hi", {"drafter": "prompt_lookup", "speculation": "tree"}, "speculation 'tree' needs a drafter among"),
        ("x" * 2100, {}, "the target's context holds 2048"),
        ("x" * 2000, {"max_new_tokens": 100}, "max_new_tokens must be at most"),
    ],
)
def test_bad_input_is_a_message_naming_the_field(ctx, view, prompt, changes, message):
    outputs = []
    with pytest.raises(gr.Error) as raised:
        for o in race(ctx, view, prompt, **changes):
            outputs.append(o)
    assert message in raised.value.message
    assert list(outputs[-1]) == [view.status]  # only the status box changes
    status = html.unescape(outputs[-1][view.status])
    assert message in status and "Traceback" not in status  # also in the status box
    *_, last = race(ctx, view, "still serving", max_new_tokens=4)
    assert "Done" in last[view.status]


def test_loading_progress_is_streamed_to_the_status_box(view):
    fresh = build_context()  # nothing loaded yet
    outputs = list(race(fresh, view, "hi", max_new_tokens=3))
    loading = [o[view.status] for o in outputs if "Loading" in o[view.status]]
    assert loading and "tiny-target" in " ".join(loading)


def test_closing_the_handler_stops_the_race(ctx, view):
    handler = race(ctx, view, "hello", max_new_tokens=400)
    shown = []
    for o in handler:
        if view.baseline in o:
            shown.append(o)
        if len(shown) == 3:
            break
    handler.close()  # Gradio's cancel; no more work, no error
    assert int(re.search(r"(\d+) tokens", shown[-1][view.speculative]).group(1)) < 400


def test_the_race_leaves_a_core_to_the_page_and_restores_torch_threads(ctx):
    import os

    import torch

    from playground.app.race.frames import race_frames

    before = torch.get_num_threads()
    pair = ctx.cache.get("tiny")
    frames = race_frames(pair, "hi", "", RunConfig(pair="tiny", max_new_tokens=8))
    seen = {torch.get_num_threads() for frame in frames if not frame.done}
    assert seen == {max(1, min(before, len(os.sched_getaffinity(0)) - 1))}
    assert torch.get_num_threads() == before


def test_finished_race_becomes_a_point_of_its_session(ctx, view):
    *_, last = race(ctx, view, "def add(a, b):", session="alice", gamma=3)
    points = ctx.measurements.get("alice")
    assert len(points) == 1 and points[0].gamma == 3 and points[0].source == "race"
    assert points[0].speedup > 0 and 0 <= points[0].alpha <= 1
    assert ctx.measurements.get("bob") == []


def stop_button():
    """(the StopFlags, the Stop button's handler) as model_job wires them for a job."""
    import gradio as gr

    from playground.app.shared.context import StopFlags
    from playground.app.shared.flow import Stop, model_job
    from playground.app.shared.form import Form

    stops = StopFlags()
    with gr.Blocks() as demo:
        run, stop, status = gr.Button("Run"), gr.Button("Stop"), gr.HTML()
        model_job(run, lambda form: iter(()), Form(), [status], status, "job", Stop(stop, "job_stop", flags=stops))
    return stops, next(f.fn for f in demo.fns.values() if f.api_name == "job_stop")


def test_the_stop_button_raises_its_sessions_flag_and_only_that():
    """model_job wires Stop to the session's stop flag (the race checks it after each engine step)."""
    stops, on_stop = stop_button()
    mine, other = stops.begin("mine"), stops.begin("other")
    assert "Stopped" in on_stop(SimpleNamespace(session_hash="mine"))
    assert mine.is_set() and not other.is_set()
    stops.end("mine", mine)
    on_stop(SimpleNamespace(session_hash="mine"))  # no job running: nothing to raise, no error
    assert stops.flags == {"other": other}


def test_stop_answers_once_the_job_it_stops_has_ended():
    """Stop's "Stopped." comes after the job's last frame: a frame the race had in flight once landed
    over it, and the page said "Racing…" after Stop (test_ui_browser's stop test, under load)."""
    import threading

    stops, on_stop = stop_button()
    began, finish, answered = threading.Event(), threading.Event(), threading.Event()

    def job():  # a race: it sees the flag after its engine step, sends its last frame, ends
        with stops.held("mine") as flag:
            began.set()
            assert flag.wait(timeout=60)
            assert finish.wait(timeout=60)

    threading.Thread(target=job, daemon=True).start()
    assert began.wait(timeout=60)
    threading.Thread(target=lambda: (on_stop(SimpleNamespace(session_hash="mine")), answered.set()),
                     daemon=True).start()
    assert not answered.wait(timeout=1.0), "Stop answered while the job it stopped was still sending frames"
    finish.set()
    assert answered.wait(timeout=60)


def test_a_draft_with_another_tokenizer_races_and_says_how_much_it_can_reach(tmp_path, view):
    """The draft knob names a model whose tokenizer has one token the target's lacks: the race drafts
    across tokenizers, keeps the target's greedy text and says what share of the target's tokens it
    can propose; a draft knob naming no model is a message naming the field."""
    import textwrap

    from playground.models.tiny import tiny_model, tiny_pair

    _, _, tokenizer = tiny_pair(seed=0)
    tokenizer.add_tokens(["<extra>"])
    tiny_model(len(tokenizer), 1, seed=3).save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    config = tmp_path / "models.yaml"
    config.write_text(textwrap.dedent(f"""
        default_pair: tiny
        models:
          tiny-target: {{sources: [{{tiny: target}}], dtype: float32}}
          tiny-draft: {{sources: [{{tiny: draft}}], dtype: float32}}
          other: {{sources: [{{local: {tmp_path / 'other'}}}], dtype: float32}}
        pairs:
          tiny: {{target: tiny-target, draft: tiny-draft, description: tiny}}
    """))
    ctx = build_context(str(config))
    *_, last = race(ctx, view, "def fibonacci(n):", draft="other", gamma=3)
    assert "identical to the baseline" in last[view.stats] and "can propose 100% of the target's tokens" in last[view.stats]
    with pytest.raises(gr.Error) as raised:
        list(race(ctx, view, "def fibonacci(n):", draft="nope"))
    assert raised.value.message.startswith("draft must be a model in models.yaml (tiny-target, tiny-draft, other)")
