"""The Drafts tab's handler on the tiny pair: the whole board, Stop within one engine step, the
session's kept entries, bad input as messages naming the field, and the winner handed on."""

from __future__ import annotations

import threading

import gradio as gr
import pytest

from playground.app.board import tab
from playground.app.board.form import BoardForm
from playground.app.shared.context import build_context
from playground.config import RunConfig
from playground.measure.bench.board import lineup


@pytest.fixture(scope="module")
def ctx():
    return build_context()


@pytest.fixture(scope="module")
def view(ctx):
    with gr.Blocks():
        return tab.build(ctx)["view"]


def form(**changes) -> BoardForm:
    return BoardForm(**{"pair": "tiny", "drafters": (lineup.ALL,), "examples": ("Code",), "tokens": 12,
                        "budget": 30.0, **changes})


def run(ctx, view, f: BoardForm) -> dict:
    """Every redraw merged, as the page ends up showing it."""
    shown = {}
    for out in tab.handle(ctx, view, f):
        shown.update(out)
    return shown


def forward_calls(model):
    calls = []
    return calls, model.register_forward_hook(lambda *_: calls.append(1))


def test_the_board_measures_every_drafter_and_keeps_them_for_the_session(ctx, view):
    shown = run(ctx, view, form(session="whole"))
    rows = shown[view.table]
    assert sorted(r[0] for r in rows) == sorted(lineup.available(ctx.registry, ctx.registry.pair("tiny")))
    assert all(r[tab.HEADERS.index("same tokens")] == "1/1" for r in rows)  # greedy: lossless, every drafter
    speeds = [r[tab.HEADERS.index("× fastest plain")] for r in rows]
    assert speeds == sorted(speeds, reverse=True)  # fastest first, each against the fastest plain decoding
    verdict = shown[view.verdict]
    assert "the fastest plain decoding measured, ours, plain" in verdict and "Winner per category" in verdict
    files = shown[view.files]
    assert [f.rsplit(".", 1)[1] for f in files][:2] == ["json", "csv"]
    names = {t.name for t in shown[view.speedup_map].data}
    assert {"formula", "break-even", "drafters"} <= names
    assert "Tokens each drafter supplied" in shown[view.coverage].layout.title.text
    winner = shown[view.winner]
    assert winner["drafter"] in ("model", "prompt_lookup", "suffix", "recycling", "self", "hybrid")
    assert RunConfig(**winner)  # a whole, valid run configuration

    calls, hook = forward_calls(ctx.cache.get("tiny").target.model)
    again = run(ctx, view, form(session="whole"))
    hook.remove()
    every = len(lineup.available(ctx.registry, ctx.registry.pair("tiny")))
    assert not calls and f"Done: {every} drafters measured" in again[view.status]  # kept: nothing measured again
    assert sorted(again[view.table]) == sorted(rows)


def test_stop_ends_the_board_within_one_step_and_keeps_nothing(ctx, view):
    calls, hook = forward_calls(ctx.cache.get("tiny").target.model)
    outs = tab.handle(ctx, view, form(session="stopped", tokens=64))
    pressed, last = None, {}
    for out in outs:
        last = out
        if pressed is None and len(calls) > 20:
            pressed = len(calls)
            ctx.stops.press("stopped")  # the Stop button raises the session's flag
    hook.remove()
    assert pressed is not None and len(calls) - pressed <= 1
    assert "Stopped" in last[view.status]
    assert not ctx.boards.store.get("stopped")  # nothing of an unfinished board is kept


@pytest.mark.parametrize("changes, message", [
    ({"examples": (), "own": "  \n "}, "prompts: choose at least one example or Spec-Bench category"),
    ({"drafters": ("medusa",)}, "drafters: unknown drafter 'medusa'"),
    ({"drafters": ()}, "drafters: choose at least one drafter"),
    ({"tokens": 0}, "max_new_tokens"),
    ({"budget": 0}, "budget (minutes): expected a number in (0, 1440]"),
    ({"budget": 0.0001}, "budget (minutes): the board needs at least about"),
    ({"pair": "no-such-pair"}, "pair: "),
])
def test_bad_input_is_a_message_naming_the_field_and_nothing_is_kept(ctx, view, changes, message):
    outs = tab.handle(ctx, view, form(session="bad", **changes))
    with pytest.raises(gr.Error) as error:
        for _ in outs:
            pass
    assert message in str(error.value)
    assert not ctx.boards.store.get("bad")
    assert not [t for t in threading.enumerate() if t.name == "lockstep-worker" and t.is_alive()]


def test_own_prompts_are_measured_and_the_report_is_the_benchmarks(ctx, view):
    shown = run(ctx, view, form(session="own", examples=(), own="Count to ten.\nName three colours.",
                                drafters=("suffix", "model")))
    report = shown[view.report]["report"]  # what the JSON file holds (its folder goes with the job)
    assert {rec["id"] for r in report["runs"] for rec in r["prompts"]} == {"own-1", "own-2"}
    assert {r["board"]["entry"] for r in report["runs"]} == {"suffix", "model"}
    assert report["schema"].startswith("playground.bench/")


def test_the_winner_reaches_the_race_and_export_tabs_as_the_same_settings():
    from playground.app.demo import build_demo, tab_export

    demo = build_demo(default_pair="tiny")
    wires = [d for d in demo.fns.values() if d.fn is tab_export.take]
    assert len(wires) == 3  # the Sweep's fastest to Export; the board's winner to Export and to the Race
    boards = [d for d in wires if d.inputs[0]._id != wires[0].inputs[0]._id]
    shared = [d for d in wires if d.inputs[0]._id == boards[0].inputs[0]._id]
    assert len(shared) == 2
    ids = [{o.elem_id for o in d.outputs} for d in shared]
    assert {f"ex-{n}" for n in RunConfig.names()} in ids and set(RunConfig.names()) in ids
    for d in shared:  # every knob, in the knobs' order: take's values land on the same names
        assert [o.elem_id.removeprefix("ex-") for o in d.outputs] == list(RunConfig.names())
    winner = {**{n: getattr(RunConfig(), n) for n in RunConfig.names()}, "pair": "tiny", "drafter": "suffix",
              "gamma": 2}
    assert dict(zip(RunConfig.names(), tab_export.take(winner))) == winner
