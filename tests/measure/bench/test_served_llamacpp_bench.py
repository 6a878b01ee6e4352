"""`python -m playground.bench --served llamacpp` end to end on the tiny pair, through the CLI's
main(argv): llama-server started plainly and with the pair's draft from the Export tab's command,
measured on the same prompt ids, greedy outputs identical, llama.cpp's draft counters read, and four
simultaneous requests served whole on four slots. Every server started is stopped."""

from __future__ import annotations

import json

import psutil
import pytest

from playground.measure.bench.served import launch

pytestmark = pytest.mark.served
needs_server = pytest.mark.skipif(launch.llama_server_binary() is None,
                                  reason="llama-server is neither on PATH nor built: run "
                                  "`python -m playground.serve setup llama-server`")
NEW = 16
ARGV = ["--served", "llamacpp", "--served-methods", "draft_model", "--pair", "tiny", "--categories", "coding",
        "--limit", "1", "--max-new-tokens", str(NEW), "--repeats", "1", "--concurrency", "1,4"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from playground.measure.bench.cli import main

    out = tmp_path_factory.mktemp("served-llamacpp") / "served.json"
    assert main([*ARGV, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def value_of(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@needs_server
def test_plain_and_draft_deployments_run_the_exported_command_on_the_gguf_files(report):
    deployments = report["served"]["deployments"]
    assert [d["name"] for d in deployments] == ["plain", "draft_model"]
    plain, spec = (d["llama_server_args"] for d in deployments)
    assert not any(a == "-md" or a.startswith("--spec-") for a in plain)  # the same command, less its speculation
    assert value_of(spec, "--spec-type") == "draft-simple" and value_of(spec, "-md").endswith("draft.gguf")
    assert value_of(plain, "-m") == value_of(spec, "-m") == report["models"]["target"]
    assert value_of(plain, "--temp") == "0" and value_of(plain, "--seed") == value_of(spec, "--seed")
    for d in deployments:  # launched as exported, with a slot per simultaneous request of the largest level
        assert d["argv"][1:1 + len(d["llama_server_args"])] == d["llama_server_args"]
        assert value_of(d["argv"], "--parallel") == "4"
    assert report["models"]["engine"] == "llama.cpp (llama-server)"


@needs_server
def test_greedy_outputs_are_identical_and_the_servers_draft_counters_are_read(report):
    (run,) = report["runs"]
    assert run["settings"]["deployment"] == "draft_model"
    assert run["summary"]["prompts"] == 1 and run["summary"]["identical_prompts"] == 1
    (record,) = run["prompts"]
    assert record["new_tokens"] == record["baseline_new_tokens"] > 0
    assert record["drafted"] > 0 and 0 <= record["accepted"] <= record["drafted"]
    assert 0 <= run["summary"]["alpha"] <= 1


@needs_server
def test_four_simultaneous_requests_come_back_whole_and_no_server_is_left(report):
    curves = report["served"]["concurrency"]
    assert set(curves) == {"plain", "draft_model"}
    for points in curves.values():
        assert [p["concurrency"] for p in points] == [1, 4]
        assert all(p["whole"] for p in points) and points[1]["tokens"] == 4 * NEW
    assert not [s for s in launch.LIVE if s.name.startswith("llama-server-")]
    argvs = [d["argv"] for d in report["served"]["deployments"]]
    for p in psutil.process_iter(["cmdline"]):
        assert p.info["cmdline"] not in argvs


def test_a_missing_llama_server_is_an_error_naming_the_setup_command(monkeypatch, capsys):
    from playground.measure.bench.cli import main

    monkeypatch.setattr(launch, "llama_server_binary", lambda: None)
    assert main(ARGV) == 1
    assert "python -m playground.serve setup llama-server" in capsys.readouterr().err
