"""The Served tab with engine OpenVINO GenAI: its own loop raced in this process on the tiny pair, plain
then with its draft, greedy text equal to our engine's; what it cannot do (URLs, n-grams, sampling, the
concurrency sweep, no openvino-genai installed) is a message naming the field."""

from __future__ import annotations

import sys

import gradio as gr
import pytest

from playground.app.served import tab

SESSION = "test-openvino-session"



def form(**changes) -> tab.ServedForm:
    v = {"pair": "tiny", "engine": tab.OPENVINO, "method": "draft_model", "gamma": 3, "new": 16,
         "temperature": 0, "plain_url": "", "spec_url": "", "prompt": "def fib(n):", "levels": "1,2"}
    return tab.ServedForm(**{**v, **changes}, session=SESSION)


def error_of(job) -> str:
    with pytest.raises(gr.Error) as error:
        list(job)
    return str(error.value)


@pytest.mark.openvino
def test_race_on_openvino_plain_then_with_its_draft_gives_our_greedy_text(served_tab):
    from playground.engine.events import output_tokens
    from playground.engine.generate import SpecConfig, generate
    from playground.models.text import encode_prompt

    pytest.importorskip("openvino_genai")
    ctx, handles = served_tab
    view = handles["view"]
    final = list(tab.race_job(ctx, handles["servers"], view, form()))[-1]
    assert final[view.plain_text] and final[view.plain_text] == final[view.spec_text]
    run, _ = form().parse()
    pair = ctx.cache.get(run.pair, **run.loading())  # the pair the race loaded (the cache keeps it)
    ids = encode_prompt(pair.tokenizer, "def fib(n):")
    ours = output_tokens(list(generate(pair.target.model, ids, SpecConfig(gamma=3, max_new_tokens=16), None,
                                       eos_token_ids=pair.eos)))
    assert final[view.plain_text] == pair.tokenizer.decode(ours, skip_special_tokens=True)
    assert "α (server counters)" in final[view.summary] and "drafted tokens accepted" in final[view.summary]
    assert [len(t.x) for t in final[view.tokens].data if len(t.x)]  # tokens over time drawn for both runs
    assert handles["servers"].running(SESSION) == []  # nothing started: it runs in this process


@pytest.mark.parametrize("changes, field", [({"plain_url": "http://127.0.0.1:1", "spec_url": "http://127.0.0.1:2"},
                                              "leave both server URLs empty"),
                                             ({"method": "ngram"}, "method: OpenVINO GenAI drafts with a draft model"),
                                             ({"temperature": 0.7}, "temperature: OpenVINO GenAI is raced greedy")])
def test_what_openvino_cannot_race_is_a_message_naming_the_field(served_tab, changes, field):
    ctx, handles = served_tab
    assert field in error_of(tab.race_job(ctx, handles["servers"], handles["view"], form(**changes)))


def test_the_concurrency_sweep_needs_a_server(served_tab):
    ctx, handles = served_tab
    message = error_of(tab.sweep_job(ctx, handles["servers"], handles["view"], form()))
    assert "engine: OpenVINO GenAI runs in this process" in message


def test_without_openvino_genai_the_race_says_what_to_install(served_tab, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # as when it is not installed
    ctx, handles = served_tab
    assert "pip install openvino-genai" in error_of(tab.race_job(ctx, handles["servers"], handles["view"], form()))


@pytest.mark.openvino
def test_stop_ends_openvinos_loop_at_the_next_token(served_tab, monkeypatch):
    """Its generate() runs without a frame to cancel between; the session's Stop flag reaches its
    streamer instead, which ends the run at the token after the press, and the draft's run is skipped."""
    from playground.app.served import openvino_race

    pytest.importorskip("openvino_genai")
    ctx, handles = served_tab
    race, seen = openvino_race.race, {}

    def pressed_mid_run(pair, ids, run, stopped):
        asked = []

        def stop_pressed_at_the_third_token():
            asked.append(True)
            if len(asked) == 3:
                ctx.stops.press(SESSION)  # what the Stop button does
            return stopped()

        seen["race"] = race(pair, ids, run, stop_pressed_at_the_third_token)
        return seen["race"]

    monkeypatch.setattr(openvino_race, "race", pressed_mid_run)
    final = list(tab.race_job(ctx, handles["servers"], handles["view"], form(new=64)))[-1]
    assert "Stopped." in final[handles["view"].status]
    _, tokens, _ = seen["race"]
    assert len(tokens["plain"]) in (3, 4) and tokens["speculative"] == []  # its pipeline may hold one more
