"""The CPU-kernel comparison (playground.measure.hardware.cpu_kernels) on the tiny pair: the command loads each
candidate, measures its curve through the named runner and prints one row each, plus the derived
hybrid row. No timing is asserted; the hybrid arithmetic is checked on made-up rows."""

from __future__ import annotations

import json
import math

import pytest

from playground.measure.hardware import cpu_kernels
from playground.measure.hardware.cpu_kernels import Row, format_table, hybrid_row


def test_command_prints_a_row_per_candidate_and_runner_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    code = cpu_kernels.main(["--pair", "tiny", "--candidates", "int4-cpu,bf16", "--runners", "eager",
                             "--max-k", "3", "--repeats", "1", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["candidate"], r["runner"]) for r in rows] == [("int4-cpu", "eager"), ("bf16", "eager"),
                                                              ("hybrid", "eager")]
    for r in rows:
        assert r["step_ms"] > 0 and len(r["v"]) == 3 and r["v"][0] == 1.0
        assert f"| {r['candidate']} | {r['runner']} | {r['step_ms']:.1f} ms | {r['v'][1]:.3f} |" in printed
    int4, bf16, hybrid = rows
    assert hybrid["step_ms"] == int4["step_ms"]
    assert hybrid["v"][2] == pytest.approx(bf16["v"][2] * bf16["step_ms"] / int4["step_ms"])


def test_the_draft_is_loaded_and_measured_when_asked(tmp_path):
    """--model draft: the pair's draft as the candidate holds it (the tiny draft has 1 layer, its target 4)."""
    candidate = cpu_kernels.CANDIDATES["int8-cpu"]
    assert cpu_kernels.load_as(candidate, "tiny", "draft").config.num_hidden_layers == 1
    assert cpu_kernels.load_as(candidate, "tiny").config.num_hidden_layers == 4
    out = tmp_path / "draft.json"
    assert cpu_kernels.main(["--pair", "tiny", "--model", "draft", "--candidates", "int8-cpu", "--runners",
                             "eager", "--max-k", "2", "--repeats", "1", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["candidate"] == "int8-cpu" and row["step_ms"] > 0 and len(row["v"]) == 2


def test_hybrid_takes_the_int4_step_and_the_bf16_multi_token_costs():
    rows = [Row("int4-cpu", "eager", 80.0, [1.0, 1.2, 1.4, 2.3], 1.0),
            Row("bf16", "eager", 200.0, [1.0, 1.0, 1.02, 1.05], 1.0)]
    hybrid = hybrid_row(rows)
    assert hybrid.step_ms == 80.0 and hybrid.v == pytest.approx([1.0, 2.5, 2.55, 2.625])
    assert hybrid_row(rows[:1]) is None  # nothing to derive without both


def test_a_failed_candidate_is_a_row_that_says_why():
    table = format_table([Row("ao-int4", "autotune", math.nan, [], 0.0, "failed: RuntimeError: no kernel")], 4)
    assert table.splitlines()[-1] == "| ao-int4 | autotune | – | – | – | – | – | failed: RuntimeError: no kernel |"


def test_an_unknown_candidate_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        cpu_kernels.main(["--candidates", "int3"])
    assert "--candidates: expected a comma-separated list of int4-cpu, int8-cpu, bf16" in capsys.readouterr().err
