"""`python -m playground.bench --runner onnxruntime --reference onnxruntime-genai` on the tiny pair (built in
float32): onnxruntime-genai's own loop, plain and speculative, timed beside ours on the same builds,
its rows in the report and the console, its greedy tokens equal to our baseline's, and the flag's
refusals named."""

import json

import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is in requirements.txt")

from playground.measure.bench import cli  # noqa: E402

RUN = ["--pair", "tiny", "--categories", "coding", "--limit", "2", "--max-new-tokens", "16", "--temperature", "0",
       "--repeats", "1", "--warmup", "1", "--runner", "onnxruntime", "--gamma", "3"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("ortgenai") / "r.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(out.parent / "cache"))
        import io
        from contextlib import redirect_stdout

        printed = io.StringIO()
        with redirect_stdout(printed):
            assert cli.main(RUN + ["--reference", "onnxruntime-genai,transformers", "--json", str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


def test_its_plain_and_speculative_loops_are_timed_beside_ours(bench):
    report, _ = bench
    run = report["runs"][0]
    assert report["config"]["reference"] == "onnxruntime-genai,transformers"
    assert run["settings"]["runner"] == "onnxruntime" and run["summary"]["build_s"] > 0
    for p in run["prompts"]:
        assert p["ortgenai_tok_s"] > 0 and p["ortgenai_speculative_tok_s"] > 0
        assert p["ortgenai_identical"]  # the same float32 build, greedy: its loop gives our baseline's tokens
        assert p["ortgenai_speculative_identical"]  # and its speculation keeps them
        assert p["baseline_decode_tok_s"] > 0 and p["ortgenai_decode_seconds"] < p["ortgenai_seconds"]
        stats = p["ortgenai_speculative_stats"]  # its own counters: it drafted, at most γ a round
        assert 0 < stats["draft_tokens_accepted"] <= stats["draft_tokens_proposed"] <= 3 * stats["rounds"]
    s = run["summary"]
    assert s["ortgenai_identical_prompts"] == 2 and s["speculative_over_ortgenai"] > 0
    assert 0 < s["ortgenai_speculative_acceptance"] <= 1
    assert s["ortgenai_resident_mb"] > 0 and s["ortgenai_speculative_resident_mb"] > 0  # each loaded at its first call
    assert {"ortgenai_tok_s", "ortgenai_speculative_decode_tok_s"} <= set(s)


def test_the_console_lists_its_rows_beside_ours(bench):
    _, printed = bench
    block = printed[printed.index("Faster than what?"):]
    for row in ("onnxruntime-genai plain (its own loop)", "onnxruntime-genai speculative (its own loop, accepts ",
                "ours plain, runner onnxruntime", "ours speculative, runner onnxruntime", "transformers generate()"):
        assert row in block
    assert "same tokens as our plain on 2/2" in block


def test_the_flag_is_refused_sampled_served_or_misspelt(capsys):
    with pytest.raises(SystemExit):
        cli.main(RUN + ["--temperature", "0.7", "--reference", "onnxruntime-genai"])
    assert "argument --reference: onnxruntime-genai is timed greedy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(RUN + ["--reference", "onnx"])
    assert "expected some of transformers, llama.cpp, onnxruntime-genai" in capsys.readouterr().err
