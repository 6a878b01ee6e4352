"""The Served tab against real vLLM servers it starts itself (the tiny pair, head_dim 64): a race
streams both panes and counts acceptance from the server, a concurrency sweep plots both
deployments, bad input is a message and the tab keeps serving, and the page's unload stops every
server it started."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.app.served import tab
from playground.serve import vllm_venv
from playground.measure.bench.served import launch

pytestmark = [
    pytest.mark.served,
    pytest.mark.skipif(not vllm_venv.is_ready(), reason=f"vLLM's venv is absent ({vllm_venv.default_venv()}): "
                       "run `python -m playground.serve setup vllm`"),
]
SESSION = "test-session"



def form(**changes) -> tab.ServedForm:
    """The tab's form, filled as this test's session sends it."""
    v = {"pair": "tiny", "engine": tab.VLLM, "method": "draft_model", "gamma": 3, "new": 24, "temperature": 0,
         "plain_url": "", "spec_url": "", "prompt": "def fib(n):", "levels": "1,2"}
    return tab.ServedForm(**{**v, **changes}, session=SESSION)


def frames(job) -> list[dict]:
    return list(job)


def last_error(ctx, handles, job, **changes):
    with pytest.raises(gr.Error) as caught:
        frames(job(ctx, handles["servers"], handles["view"], form(**changes)))
    return str(caught.value)


def test_bad_input_is_a_message_naming_what_failed(served_tab):
    ctx, handles = served_tab
    assert "must look like http://HOST:PORT" in last_error(ctx, handles, tab.race_job, plain_url="localhost:80",
                                                            spec_url="localhost:81")
    port = launch.free_port()
    refused = last_error(ctx, handles, tab.race_job, plain_url=f"http://127.0.0.1:{port}",
                         spec_url=f"http://127.0.0.1:{port}")
    assert "connection refused" in refused
    assert "give both URLs" in last_error(ctx, handles, tab.race_job, plain_url="http://127.0.0.1:1")
    assert "gamma" in last_error(ctx, handles, tab.race_job, gamma=99)
    assert "simultaneous requests" in last_error(ctx, handles, tab.sweep_job, levels="0,x")


def test_race_and_sweep_on_servers_the_tab_starts_then_unload_stops_them(served_tab):
    ctx, handles = served_tab
    view, servers = handles["view"], handles["servers"]
    race = frames(tab.race_job(ctx, servers, view, form()))
    final = race[-1]
    assert final[view.plain_text] and final[view.plain_text] == final[view.spec_text]  # greedy: same text
    assert "tok/s" in final[view.summary] and "α (server counters)" in final[view.summary]
    bars = final[view.acceptance].data[0]
    assert bars.type == "bar" and all(b <= a for a, b in zip(bars.y, bars.y[1:]))
    started = servers.running(SESSION)
    assert len(started) == 2 and all(s.alive() for s in started)

    sweep = frames(tab.sweep_job(ctx, servers, view, form(levels="1,2")))
    rate = [f for f in sweep if view.rate in f][-1][view.rate]
    assert [list(t.x) for t in rate.data] == [[1, 2], [1, 2]]
    assert servers.running(SESSION) == started  # the same servers, reused

    pids = [s.process.pid for s in started]
    handles["unload"](type("Request", (), {"session_hash": SESSION})())
    assert not any(s.alive() for s in started) and servers.running(SESSION) == []
    assert all(launch.group_members(pid) == [] for pid in pids)
