"""The step profile (playground.measure.hardware.step_profile) on the tiny pair built in float32: the command
runs our plain loop and onnxruntime-genai's own on the same build end to end, each decoding step counted
once, the rows of each side adding up to its total per token with none below zero (nothing counted twice),
ONNX Runtime's own profile read when asked; the spans' bookkeeping on a made-up clock. No timing is asserted."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is in requirements.txt")

from playground.measure.hardware import step_profile, step_spans  # noqa: E402

NEW, REPEATS = 8, 2
RUN = ["--pair", "tiny", "--runner", "onnxruntime", "--prompt-tokens", "16", "--new-tokens", str(NEW),
       "--repeats", str(REPEATS)]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("step_profile") / "profile.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(out.parent / "cache"))  # the tiny pair's builds, made here
        printed = io.StringIO()
        with redirect_stdout(printed):
            assert step_profile.main(RUN + ["--ort-profile", "--json", str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


@pytest.mark.parametrize("name", ["ours", "theirs"])
def test_each_sides_rows_add_up_to_its_total_and_none_is_negative(profiled, name):
    report, _ = profiled
    found = report[name]
    rows = found["ms_per_token"]
    assert set(rows) == set(report["rows"][name])
    assert sum(rows.values()) == pytest.approx(found["total_ms"], rel=1e-9)
    assert all(ms >= -0.05 * found["total_ms"] for ms in rows.values()), rows  # a span counted twice goes below 0
    assert found["total_ms"] == pytest.approx(sum(found["per_run_total_ms"]) / REPEATS, rel=1e-6)


def test_every_decoding_step_is_counted_once_and_the_prefill_not_at_all(profiled):
    report, _ = profiled
    ours, theirs = report["ours"], report["theirs"]
    assert ours["decode_tokens"] == theirs["decode_tokens"] == REPEATS * (NEW - 1)
    for row in ("ort_run", "runner_bind", "cached_model", "accept", "describe", "step", "cut_output"):
        assert ours["calls_per_token"][row] == 1, row  # one forward, one pick, one event per token
    assert theirs["calls_per_token"]["generate_next_token"] == 1
    assert theirs["calls_per_token"]["append_tokens"] == 0  # the prompt's forward is the prefill
    assert report["identical_tokens"]  # one float32 build, greedy: the same tokens
    assert report["ours_over_theirs_time"] > 0 and len(report["ours_over_theirs_time_per_repeat"]) == REPEATS


def test_the_table_names_each_row_and_the_ratio(profiled):
    report, printed = profiled
    for what in [*report["rows"]["ours"].values(), "generate_next_token: its run", "ours / theirs, time per token"]:
        assert what in printed
    assert "ONNX Runtime's profiler" in printed


def test_onnx_runtimes_own_profile_gives_one_run_per_decoded_token(profiled):
    report, _ = profiled
    for name, call in (("ours", "run_with_iobinding"), ("theirs", "generate_next_token")):
        found = report["ort_profile"][name]
        assert found["runs"] == NEW - 1 and found["model_run_ms"] > 0 and found["call"] == call


def test_a_runner_other_than_onnxruntime_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    with pytest.raises(SystemExit, match="runs this pair's target on eager.*give --runner onnxruntime"):
        step_profile.main(["--pair", "tiny", "--prompt-tokens", "8", "--new-tokens", "4", "--repeats", "1"])


def test_the_prompt_is_as_long_as_asked():
    from playground.models.tiny import byte_tokenizer

    tokenizer = byte_tokenizer()
    assert 395 <= len(step_profile.prompt_ids(tokenizer, 400)) <= 400


def test_spans_keep_each_names_own_time_from_the_gates_second_call(monkeypatch):
    """outer (3 s of its own) calls inner (2 s): outer keeps 3, inner 2; the gate's first call is the prefill."""
    now = [0.0]
    monkeypatch.setattr(step_spans.time, "perf_counter", lambda: now[0])
    spans = step_spans.Spans()

    def inner():
        now[0] += 2

    def outer():
        now[0] += 1
        timed_inner()
        now[0] += 2

    timed_inner = spans.wrap("inner", inner)
    gated = spans.gate("outer", outer)
    for _ in range(3):
        gated()
    assert dict(spans.seconds) == {"outer": 6.0, "inner": 4.0}  # the last two calls of 3 + 2
    assert dict(spans.calls) == {"outer": 2, "inner": 2}
