"""The Served tab with engine llama.cpp: llama-server started on the tiny pair's GGUF files from the
exported command (plainly and with the draft), raced and swept, and stopped when the page closes."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.app.served import tab
from playground.measure.bench.served import launch

pytestmark = pytest.mark.served
needs_server = pytest.mark.skipif(launch.llama_server_binary() is None,
                                  reason="llama-server is neither on PATH nor built: run "
                                  "`python -m playground.serve setup llama-server`")
SESSION = "test-llamacpp-session"



def form(session=SESSION, **changes) -> tab.ServedForm:
    v = {"pair": "tiny", "engine": tab.LLAMACPP, "method": "draft_model", "gamma": 3, "new": 16,
         "temperature": 0, "plain_url": "", "spec_url": "", "prompt": "def fib(n):", "levels": "1,2"}
    return tab.ServedForm(**{**v, **changes}, session=session)


@needs_server
def test_race_and_sweep_on_llama_servers_the_tab_starts_then_unload_stops_them(served_tab):
    ctx, handles = served_tab
    view, servers = handles["view"], handles["servers"]
    final = list(tab.race_job(ctx, servers, view, form()))[-1]
    assert final[view.plain_text] and final[view.plain_text] == final[view.spec_text]  # greedy: same text
    assert "α (server counters)" in final[view.summary] and "drafted tokens accepted" in final[view.summary]
    started = servers.running(SESSION)
    assert len(started) == 2 and all(s.alive() for s in started)
    assert sorted("draft-simple" in s.argv for s in started) == [False, True]
    assert all(s.argv[s.argv.index("--parallel") + 1] == "2" for s in started)  # a slot per request

    sweep = list(tab.sweep_job(ctx, servers, view, form()))
    rate = [f for f in sweep if view.rate in f][-1][view.rate]
    assert [list(t.x) for t in rate.data] == [[1, 2], [1, 2]]
    assert servers.running(SESSION) == started  # the same servers, reused

    pids = [s.process.pid for s in started]
    handles["unload"](type("Request", (), {"session_hash": SESSION})())
    assert not any(s.alive() for s in started) and servers.running(SESSION) == []
    assert all(launch.group_members(pid) == [] for pid in pids)


def test_a_missing_llama_server_is_a_message_naming_the_setup_command(served_tab, monkeypatch):
    ctx, handles = served_tab
    monkeypatch.setattr(launch, "llama_server_binary", lambda: None)
    with pytest.raises(gr.Error, match="python -m playground.serve setup llama-server"):
        list(tab.race_job(ctx, handles["servers"], handles["view"], form(session="no-binary")))
    assert handles["servers"].running("no-binary") == []
