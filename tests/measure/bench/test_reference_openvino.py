"""`python -m playground.bench --reference openvino` on the tiny pair (each model written as a float32 GGUF
file at load, which openvino_files.py converts to F16 and has OpenVINO write as IR): OpenVINO GenAI's
LLMPipeline reads the target's IR, its greedy tokens equal our engine's
on the same prompt ids, it stops at the same end tokens, its speculative decoding with the draft's file
keeps them, its rows are in the JSON and the console; no openvino-genai, a target without a GGUF file or
a file gone are clear errors.
Timings are printed, never asserted."""

from __future__ import annotations

import io
import json
import re
import sys
from contextlib import redirect_stdout

import pytest

from playground.measure.bench import cli
from playground.measure.bench.references import openvino as reference_openvino
from playground.models.tiny import tiny_pair

RUN = ["--pair", "tiny", "--categories", "coding", "--limit", "2", "--max-new-tokens", "24", "--temperature", "0",
       "--repeats", "2", "--warmup", "1", "--gamma", "3", "--reference", "openvino"]
PROMPT = [(7 * i + 3) % 250 for i in range(40)]
OTHER = [(5 * i + 1) % 250 for i in range(30)]


@pytest.fixture(scope="module")
def openvino_genai():
    return pytest.importorskip("openvino_genai", reason="openvino-genai: pip install openvino-genai (docs/runners.md)")


def written(model, tokenizer):
    from playground.models import gguf_file

    gguf_file.record(model, gguf_file.written_locator(model, tokenizer))
    return model


@pytest.fixture(scope="module")
def pair():
    target, draft, tokenizer = tiny_pair(seed=0)
    return written(target, tokenizer), written(draft, tokenizer), tokenizer


def ours(target, prompt, config):
    from playground.engine.events import output_tokens
    from playground.engine.generate import generate

    return output_tokens(list(generate(target, prompt, config, None)))



@pytest.mark.openvino
def test_greedy_tokens_equal_ours_and_stop_at_our_end_tokens(openvino_genai, pair):
    from playground.engine.generate import SpecConfig

    target, _, tokenizer = pair
    tokenizers = (tokenizer, tokenizer)
    config = SpecConfig(gamma=3, max_new_tokens=40, temperature=0.0)
    mine = ours(target, PROMPT, config)
    tokens, seconds, first, stats = reference_openvino.decode(target, PROMPT, config, (), tokenizers=tokenizers)
    print(f"openvino plain: {len(tokens)} tokens in {seconds:.3f} s, first after {first}")
    assert tokens == mine and len(tokens) == 40 and stats == {}
    assert 0 < first < seconds
    pipe = reference_openvino.pipeline_for(target, tokenizers=tokenizers)
    reference_openvino.decode(target, OTHER, config, (), tokenizers=tokenizers)
    again, *_ = reference_openvino.decode(target, PROMPT, config, (), tokenizers=tokenizers)
    assert again == mine and reference_openvino.pipeline_for(target, tokenizers=tokenizers) is pipe  # loaded once, reused
    stop = mine[5]
    cut, *_ = reference_openvino.decode(target, PROMPT, config, (stop,), tokenizers=tokenizers)
    assert cut == mine[:mine.index(stop) + 1]  # the end token is emitted and ends the run, as ours



@pytest.mark.openvino
def test_speculative_with_the_draft_file_keeps_the_tokens_and_counts_acceptance(openvino_genai, pair):
    from playground.engine.generate import SpecConfig

    target, draft, tokenizer = pair
    tokenizers = (tokenizer, tokenizer)
    problem = reference_openvino.speculative_problem(target, draft, tokenizers)
    assert problem is None, problem
    config = SpecConfig(gamma=3, max_new_tokens=40, temperature=0.0)
    tokens, seconds, first, stats = reference_openvino.decode(target, PROMPT, config, (), draft, tokenizers)
    print(f"openvino speculative: {len(tokens)} tokens in {seconds:.3f} s, stats {stats}")
    assert tokens == ours(target, PROMPT, config)
    assert 0 <= stats["accepted_tokens"] <= stats["draft_tokens"] and stats["draft_tokens"] > 0



@pytest.mark.openvino
def test_the_bench_times_its_rows_beside_ours(openvino_genai, tmp_path):
    out, printed = tmp_path / "r.json", io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(RUN + ["--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["config"]["reference"] == "openvino"
    run = report["runs"][0]
    for p in run["prompts"]:
        assert 0 < p["openvino_new_tokens"] <= 24 and p["openvino_seconds"] > 0 and p["openvino_tok_s"] > 0
        assert p["openvino_identical"]  # float16-rounded weights computed in float32: our baseline's tokens
        assert p["openvino_decode_seconds"] < p["openvino_seconds"]
        assert p["openvino_speculative_identical"]
        stats = p["openvino_speculative_stats"]
        assert 0 <= stats["accepted_tokens"] <= stats["draft_tokens"]
    s = run["summary"]
    assert s["openvino_identical_prompts"] == 2 and s["baseline_over_openvino"] > 0
    assert 0 <= s["openvino_speculative_acceptance"] <= 1
    assert s["openvino_resident_mb"] > 0 and s["openvino_speculative_resident_mb"] > 0  # each loaded at its first call
    block = printed.getvalue()[printed.getvalue().index("Faster than what?"):]
    for row in ("OpenVINO GenAI plain (its LLMPipeline)", "OpenVINO GenAI speculative", "ours plain, runner auto"):
        assert row in block
    assert "same tokens as our plain on 2/2" in block


def test_without_openvino_genai_the_flag_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # as when it is not installed: import fails
    with pytest.raises(SystemExit) as exit_:
        cli.main(RUN + ["--json", str(tmp_path / "r.json")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --reference: OpenVINO GenAI is not importable here" in err
    assert "pip install openvino-genai" in err
    assert list(tmp_path.iterdir()) == []


def test_a_target_without_a_gguf_file_or_with_its_file_gone_is_a_clear_error(tmp_path):
    target, _, _ = tiny_pair(seed=0)  # built in process, not loaded: nothing recorded its GGUF file
    with pytest.raises(ValueError, match="OpenVINO GenAI reads the GGUF file the target was loaded from"):
        reference_openvino.model_file(target)
    gone = tmp_path / "removed.gguf"
    target.gguf_file = lambda: gone
    with pytest.raises(ValueError, match=re.escape(f"{gone} is not there")):
        reference_openvino.model_file(target)


def test_sampled_runs_are_refused(capsys):
    with pytest.raises(SystemExit):
        cli.main(RUN + ["--temperature", "0.7"])
    assert "argument --reference: openvino is timed greedy" in capsys.readouterr().err


def q5_0_file(path):
    """A tiny GGUF file whose matrices are Q5_0, as most of the default draft's are."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q5_0)
    writer.add_token_list(["a", "b"])
    values = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    q = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q5_0)
    writer.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q5_0)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return values


def test_what_its_reader_refuses_is_converted_once_and_the_rest_copied(tmp_path, monkeypatch):
    import gguf
    import numpy as np

    from playground.measure.bench.references import openvino_files

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "draft.gguf"
    values = q5_0_file(source)
    assert openvino_files.refused_tensors(source) == ["blk.0.attn_q.weight"]  # a float32 norm is read
    converted = openvino_files.readable_gguf(source)
    assert converted != source and openvino_files.refused_tensors(converted) == []
    reader = gguf.GGUFReader(str(converted))
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert q.tensor_type == gguf.GGMLQuantizationType.Q8_0
    back = gguf.quants.dequantize(q.data, q.tensor_type).reshape(4, 64)
    assert np.abs(back - values).max() < 0.2  # Q5_0 then Q8_0: within Q5_0's own rounding
    assert reader.fields["tokenizer.ggml.tokens"].contents() == ["a", "b"]
    assert openvino_files.readable_gguf(source) == converted  # made once: the same folder, not remade
    assert [p.name for p in (tmp_path / "cache" / "openvino").iterdir()] == [converted.parent.name]


def test_a_conversion_that_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    from playground.measure.bench.references import openvino_files

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "draft.gguf"
    q5_0_file(source)

    def dies(work):
        (work / "model.gguf").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        openvino_files.cached_folder(source, "gguf", dies)
    assert list((tmp_path / "cache" / "openvino").iterdir()) == []  # no half-written folder is ever found
