"""`python -m playground.bench --reference llama.cpp` on the tiny pair (each model written as a float32
GGUF file at load): llama.cpp's own plain decoding is timed beside ours, its row is in the JSON and
the console's "faster than what?" table, its greedy tokens equal our baseline's, every call pays
its prefill from an empty cache, and a target without a GGUF file, or no llama_cpp, is a clear error.
Timings are printed, never asserted."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from types import SimpleNamespace

import pytest

from playground.measure.bench import cli

from playground.measure.bench.references import llamacpp as reference_llamacpp
from playground.models.tiny import tiny_pair

RUN = ["--pair", "tiny", "--categories", "coding,qa", "--limit", "1", "--max-new-tokens", "24",
       "--repeats", "2", "--warmup", "0", "--reference", "llama.cpp"]
PROMPT = [(7 * i + 3) % 250 for i in range(40)]
OTHER = [(5 * i + 1) % 250 for i in range(30)]


@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp", reason="the optional extra llama-cpp-python (docs/runners.md)")


@pytest.fixture(scope="module")
def bench(llama_cpp, tmp_path_factory):
    """One CLI run, greedy and sampled, with the llama.cpp reference and --tree; its JSON and console text."""
    out, printed = tmp_path_factory.mktemp("ref") / "r.json", io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(RUN + ["--tree", "--sweep", "temperature=0,0.7", "--json", str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


@pytest.mark.llamacpp
def test_the_llamacpp_row_is_in_the_json_per_prompt_and_summary(bench):
    report, _ = bench
    assert report["config"]["reference"] == "llama.cpp"
    assert [r["settings"]["temperature"] for r in report["runs"]] == [0.0, 0.7]
    for run in report["runs"]:
        greedy = run["settings"]["temperature"] == 0
        for p in run["prompts"]:
            assert 0 < p["llamacpp_new_tokens"] <= 24 and p["llamacpp_seconds"] > 0 and p["llamacpp_tok_s"] > 0
            assert p["speculative_over_llamacpp"] > 0 and p["tree_over_llamacpp"] > 0
            assert p["llamacpp_sampling"] == ("greedy" if greedy else "llama.cpp's own sampler and RNG")
            if greedy:  # a float32 file, a float32 cache: llama.cpp decodes what our baseline does
                assert p["llamacpp_identical"] is True and p["llamacpp_first_divergence"] is None
            else:
                assert p["llamacpp_identical"] is None
        s = run["summary"]
        assert s["llamacpp_tok_s"] > 0 and s["baseline_over_llamacpp"] > 0 and s["speculative_over_llamacpp"] > 0
        # what its first call loaded, the same on every prompt (the loop stays loaded)
        assert s["llamacpp_resident_mb"] > 0 and {p["llamacpp_resident_mb"] for p in run["prompts"]} == {s["llamacpp_resident_mb"]}
        assert s["llamacpp_identical_prompts"] == (2 if greedy else None)
        assert {"llamacpp_tok_s", "speculative_over_llamacpp"} <= set(run["categories"]["coding"])


@pytest.mark.llamacpp
def test_the_console_table_has_the_llamacpp_row_beside_ours(bench):
    _, printed = bench
    assert "Faster than what?" in printed
    block = printed[printed.index("Faster than what?"):]
    for row in ("llama.cpp plain (its own decode loop)", "ours plain, runner auto", "ours speculative, runner auto",
                "ours tree, runner auto"):
        assert row in block
    assert "same tokens as our plain on 2/2" in block  # the greedy setting's llama.cpp row
    assert "llama.cpp samples with its own sampler and RNG" in block


@pytest.mark.llamacpp
def test_the_target_comparison_has_the_llamacpp_row(llama_cpp, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert cli.main(RUN[:-2] + ["--repeats", "1", "--target-quantizations", "none,int8-cpu", "--reference",
                                "llama.cpp", "--json", str(out)]) == 0
    table = json.loads(out.read_text())["comparison"]
    assert table["llamacpp_tok_s"] > 0
    assert all(r["over_llamacpp"] == pytest.approx(r["tok_s"] / table["llamacpp_tok_s"]) for r in table["speculative"])
    assert "llama.cpp" in capsys.readouterr().out.split("Faster than what? plain runs")[1]


@pytest.mark.llamacpp
def test_greedy_tokens_equal_our_baseline_and_repeats_start_from_an_empty_cache(llama_cpp):
    from playground.engine.events import output_tokens
    from playground.engine.generate import SpecConfig, generate
    from playground.models import gguf_file

    target, _, tokenizer = tiny_pair(seed=0)
    gguf_file.record(target, gguf_file.written_locator(target, tokenizer))
    config = SpecConfig(gamma=4, max_new_tokens=40, temperature=0.0)
    ours = output_tokens(list(generate(target, PROMPT, config, None)))
    first, *_ = reference_llamacpp.plain_decode(target, PROMPT, config, ())
    llm = reference_llamacpp.decoder_for(target).llm
    assert first == ours and len(first) == 40
    reference_llamacpp.plain_decode(target, OTHER, config, ())
    llama_cpp.llama_perf_context_reset(llm.ctx)
    again, *_ = reference_llamacpp.plain_decode(target, PROMPT, config, ())
    assert again == ours and reference_llamacpp.decoder_for(target).llm is llm  # loaded once, reused
    counted = llama_cpp.llama_perf_context(llm.ctx)  # llama.cpp's own counters of what it evaluated
    # the repeat paid its whole prefill (generate() alone would reuse the cached prompt and feed one
    # token), then one decode per new token but the last
    assert (counted.n_p_eval, counted.n_eval) == (len(PROMPT), len(again) - 1)
    stop = ours[5]
    cut, *_ = reference_llamacpp.plain_decode(target, PROMPT, config, (stop,))
    assert cut == ours[:ours.index(stop) + 1]  # the end token is emitted and ends the run, as ours


@pytest.mark.llamacpp
def test_a_target_without_a_gguf_file_is_a_clear_error(llama_cpp, capsys):
    target, _, _ = tiny_pair(seed=0)  # built in process, not loaded: nothing recorded its GGUF file
    with pytest.raises(ValueError, match="was not loaded from one"):
        reference_llamacpp.gguf_path(target)
    parser = cli.build_parser()
    args = parser.parse_args(RUN)
    args.argv = RUN
    plan = cli.make_plan(args)
    with pytest.raises(SystemExit) as exit_:
        cli.check_gguf(parser, plan, SimpleNamespace(target=SimpleNamespace(model=target)))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --reference: llama.cpp decodes the GGUF file the target was loaded from" in err


def test_without_llama_cpp_the_flag_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as when the extra is not installed: import fails
    with pytest.raises(SystemExit) as exit_:
        cli.main(RUN + ["--json", str(tmp_path / "r.json")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --reference: llama.cpp needs llama_cpp" in err and "llama-cpp-python" in err
    assert list(tmp_path.iterdir()) == []
