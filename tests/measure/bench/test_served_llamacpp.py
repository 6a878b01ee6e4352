"""llama.cpp's own server against a real llama-server (built by `python -m playground.serve setup
llama-server`; .ci/run builds it), never a mock. The tiny pair is written as float32 GGUF files and
served plainly and with its draft from the Export tab's command as written; llama.cpp is an
independent oracle for the engine's greedy output. Every server started here is stopped, and checked
to leave no process behind."""

from __future__ import annotations

import json
import signal
import urllib.request
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import psutil
import pytest

from playground import export
from playground.config import RunConfig
from playground.measure.bench.served import launch
from playground.measure.bench.served.client import ServedClient, ServedError
from playground.measure.bench.served.counters import from_llamacpp_timings
from playground.models.registry import load_registry

pytestmark = [
    pytest.mark.served,
    pytest.mark.skipif(launch.llama_server_binary() is None,
                       reason="llama-server is neither on PATH nor built: run "
                       "`python -m playground.serve setup llama-server`"),
]

PROMPT = [(7 * i + 3) % 250 for i in range(40)]  # token ids: no tokenizer can differ
NEW = 24
GAMMA = 3


def gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The tiny pair in process and as float32 GGUF files (the llamacpp runner's writer)."""
    from playground.models.gguf_file import write_gguf
    from playground.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair(seed=0)
    folder = tmp_path_factory.mktemp("gguf")
    return target, write_gguf(target, tokenizer, folder / "target.gguf"), write_gguf(draft, tokenizer,
                                                                                       folder / "draft.gguf")


def export_for(pair, **knobs) -> str:
    """The Export tab's llama-server command for the tiny pair, its models named by their GGUF files."""
    _, target, draft = pair
    run = RunConfig(pair="tiny", gamma=GAMMA, max_new_tokens=NEW, **knobs)
    s = export.from_settings(load_registry(), run)
    s = replace(s, target_ref=export.ModelRef("tiny-target", None, str(target), None),
                draft_ref=export.ModelRef("tiny-draft", None, str(draft), None))
    return export.llamacpp_server(s)


@pytest.fixture(scope="module")
def exported(pair) -> str:
    return export_for(pair)


@contextmanager
def running(args, name):
    server = launch.start_llamacpp(args, name=name, ready_timeout=120)
    try:
        yield server
    finally:
        server.stop()
    assert not server.alive() and gone([server.process.pid]) and server.resident_bytes() is None
    assert server not in launch.LIVE and launch.group_members(server.process.pid) == []


@pytest.fixture(scope="module")
def plain(pair):
    with running(["-m", str(pair[1])], "llama-server-plain") as server:
        yield server


@pytest.fixture(scope="module")
def speculative(exported):
    """Launched from the exported text itself: the command runs as written."""
    args = launch.llamacpp_args_of(exported)
    assert args[args.index("--spec-type") + 1] == "draft-simple" and "-md" in args
    with running(args, "llama-server-draft") as server:
        yield server


@pytest.fixture(scope="module")
def engine_tokens(pair) -> list[int]:
    from playground.engine.events import output_tokens
    from playground.engine.generate import SpecConfig, generate

    return output_tokens(list(generate(pair[0], PROMPT, SpecConfig(max_new_tokens=NEW, runner="eager"))))


def native(server: launch.Server, n: int = NEW) -> dict:
    """llama.cpp's own /completion endpoint, which returns the generated token ids."""
    body = {"prompt": PROMPT, "n_predict": n, "temperature": 0.0, "return_tokens": True, "ignore_eos": True,
            "cache_prompt": False}
    request = urllib.request.Request(server.url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_greedy_tokens_are_the_same_plain_speculative_and_in_our_engine(plain, speculative, engine_tokens):
    by_plain, by_spec = native(plain), native(speculative)
    assert len(by_plain["tokens"]) == NEW and by_plain["timings"]["prompt_n"] == len(PROMPT)
    assert by_spec["tokens"] == by_plain["tokens"]
    assert by_plain["tokens"] == engine_tokens  # llama.cpp as an independent oracle for the engine


def test_the_openai_stream_agrees_and_its_timings_are_parsed_and_consistent(plain, speculative):
    by_plain = plain.client().complete(PROMPT, NEW)
    by_spec = speculative.client().complete(PROMPT, NEW)
    assert by_plain.whole and by_spec.whole and by_plain.tokens == by_spec.tokens == NEW
    assert by_spec.text == by_plain.text
    counters = from_llamacpp_timings(by_spec.timings)
    assert counters.draft_tokens > 0 and 0 <= counters.accepted_tokens <= counters.draft_tokens
    assert by_spec.timings["predicted_n"] == NEW
    assert from_llamacpp_timings(by_plain.timings).draft_tokens == 0  # no draft: no draft_n at all
    assert "draft_n" not in by_plain.timings


def test_a_server_holds_at_least_the_gguf_files_it_read(pair, plain, speculative):
    """Its processes' resident memory (what --peers reports) after a completion has read every weight:
    llama.cpp maps each file, so the pages read count for the server that mapped them."""
    _, target, draft = pair
    for server in (plain, speculative):
        native(server)
    assert plain.resident_bytes() >= target.stat().st_size
    assert speculative.resident_bytes() >= target.stat().st_size + draft.stat().st_size


@pytest.mark.parametrize("knobs", [dict(drafter="prompt_lookup"), dict(drafter="suffix"),
                                   dict(drafter="hybrid"), dict(adaptive=True, min_confidence=0.5)], ids=str)
def test_every_exported_llama_cpp_command_launches_as_written_and_keeps_greedy_output(pair, plain, knobs):
    """Each --spec-type the export writes (n-gram types, a draft and n-grams together, adaptive draft
    limits) is accepted by this llama-server and leaves the greedy tokens as the plain server's."""
    text = export_for(pair, **knobs)
    with running(launch.llamacpp_args_of(text), "llama-server-exported") as server:
        assert native(server)["tokens"] == native(plain)["tokens"]


def test_four_concurrent_requests_on_four_slots_all_come_back_whole(exported):
    with running(launch.llamacpp_args_of(exported) + ["--parallel", "4"], "llama-server-parallel") as server:
        client = server.client()
        single = client.complete(PROMPT, NEW).text
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda _: client.complete(PROMPT, NEW), range(4)))
        assert all(o.whole and o.tokens == NEW and o.text == single for o in outs)
        assert all(from_llamacpp_timings(o.timings).draft_tokens > 0 for o in outs)


def test_a_stopped_servers_port_is_refused_by_name(pair):
    with running(["-m", str(pair[1])], "llama-server-stopped") as server:
        url = server.url
    with pytest.raises(ServedError, match=f"{url}/v1/models: connection refused"):
        ServedClient(url).models()


def test_a_server_killed_mid_stream_is_named_and_leaves_no_process(pair):
    server = launch.start_llamacpp(["-m", str(pair[1]), "--ctx-size", "2048"], name="llama-server-killed",
                                   ready_timeout=120)
    with server:
        pid = server.process.pid
        stream = server.client().stream(PROMPT, 2000)  # longer than the kill takes
        first = next(stream)
        assert first.text
        server.process.send_signal(signal.SIGKILL)
        with pytest.raises(ServedError, match="127.0.0.1.*(mid-stream|before the completion)"):
            for _ in stream:
                pass
    assert gone([pid]) and server not in launch.LIVE


def test_a_server_not_ready_in_time_is_stopped_and_names_the_wait(pair):
    port = launch.free_port()
    argv = [launch.llama_server_binary(), "-m", str(pair[1]), "--host", launch.HOST, "--port", str(port)]
    server = launch.Server(argv, port, {}, "llama-server-slow").start()
    with pytest.raises(ServedError, match=rf"llama-server-slow was not ready on http://127.0.0.1:{port} "
                                          "within 0 s; its log .* ends"):
        server.wait_ready(timeout=0)
    assert server not in launch.LIVE and not server.alive() and gone([server.process.pid])


def test_a_server_that_exits_before_ready_shows_its_log(tmp_path):
    with pytest.raises(ServedError, match="llama-server-bad exited .* before it was ready.*its log"):
        launch.start_llamacpp(["-m", str(tmp_path / "no-such-model.gguf")], name="llama-server-bad",
                              ready_timeout=120)
    assert not [s for s in launch.LIVE if s.name == "llama-server-bad"]
