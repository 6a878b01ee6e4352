"""`python -m playground.bench --peers` on the tiny pair: every peer installed here, on the same prompts,
in one table, each greedy output held to our plain run's (float32 files: every engine computes what
PyTorch does; vLLM serves a wider tiny pair, so its rows say "other weights"). The full run needs llama.cpp's extra and server, OpenVINO GenAI and vLLM's venv (CI's
second pass); the flag checks and the table's arithmetic need nothing. Timings are printed, never
asserted."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from playground.measure.bench import cli, peers

RUN = ["--pair", "tiny", "--categories", "coding", "--limit", "2", "--max-new-tokens", "24", "--repeats", "1",
       "--warmup", "1"]


@pytest.mark.parametrize("extra", [["--served", "vllm"], ["--reference", "llama.cpp"], ["--drafters", "all"],
                                   ["--temperature", "0.7"]])
def test_peers_refuses_the_flags_it_sets_itself(extra, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(RUN + ["--peers", "--json", str(tmp_path / "r.json")] + extra)
    assert exit_.value.code == 2
    assert "argument --peers:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def served_report(plain_rate: float, spec_rate: float, text: str) -> dict:
    record = {"id": 1, "baseline_new_tokens": 10, "baseline_seconds": 10 / plain_rate, "baseline_first_token_s": 0.5,
              "new_tokens": 10, "speculative_seconds": 10 / spec_rate, "first_token_s": 0.5,
              "baseline_text": "same", "text": text}
    summary = {"baseline_tok_s": plain_rate, "speculative_tok_s": spec_rate, "alpha": 0.5,
               "speedup": spec_rate / plain_rate}
    return {"runs": [{"settings": {"deployment": "draft_model"}, "summary": summary, "prompts": [record]}],
            "served": {"deployments": [{"name": "plain", "resident_mb": 700.0},
                                       {"name": "draft_model", "resident_mb": 1100.0}]}}


def test_the_table_puts_every_row_over_our_plain_run_and_holds_text_to_ours():
    summary = {"prompts": 1, "baseline_tok_s": 4.0, "speculative_tok_s": 5.0, "alpha": 0.8, "identical_prompts": 1,
               "llamacpp_tok_s": 8.0, "llamacpp_identical_prompts": 0, "llamacpp_resident_mb": 900.0,
               "baseline_weights_mb": 600.0, "speculative_weights_mb": 800.0,
               "baseline_resident_mb": 1500.0, "speculative_resident_mb": 1550.0}
    ours = {"runs": [{"settings": {"drafter": "model", "gamma": 3, "runner": "auto"}, "runner": "eager",
                      "summary": summary, "prompts": [{"id": 1, "baseline_text": "same"}]}]}
    rows = peers.peer_rows({"ours": ours, "vllm": served_report(2.0, 3.0, "different")})
    by = {r["engine"]: r for r in rows}
    assert [r["tok_s"] for r in rows] == sorted((r["tok_s"] for r in rows), reverse=True)
    assert by["ours plain (runner eager)"]["over_ours_plain"] == 1.0
    assert by["llama.cpp's own loop, plain"]["over_ours_plain"] == 2.0
    assert by["llama.cpp's own loop, plain"]["identical"] == "0/1"
    assert by["vLLM, plain"]["identical"] == "1/1" and by["vLLM, draft_model"]["identical"] == "0/1"
    assert by["vLLM, draft_model"]["speedup_over_own_plain"] == 1.5
    assert by["vLLM, plain"]["decode_tok_s"] == pytest.approx(9 / (5 - 0.5))  # after the first token
    names = ("ours plain (runner eager)", "ours speculative (model, γ 3)", "llama.cpp's own loop, plain",
             "vLLM, plain", "vLLM, draft_model")
    # measured for every engine; counted for ours only (no tensor count reaches another engine's memory)
    assert [by[name]["resident_mb"] for name in names] == [1500.0, 1550.0, 900.0, 700.0, 1100.0]
    assert [by[name]["weights_mb"] for name in names] == [600.0, 800.0, None, None, None]
    table = peers.format_peers(rows, ["vLLM: no venv (python -m playground.serve setup vllm)"])
    assert "| ours speculative (model, γ 3) | 5.00 |" in table and "left out: vLLM: no venv" in table
    assert "| vLLM, draft_model | 3.00 | 3.18 | 0.75× | 0.50 | 0/1 | 1100 | — |" in table and peers.MEMORY_NOTE in table
    assert "| ours speculative (model, γ 3) | 5.00 | — | 1.25× | 0.80 | 1/1 | 1550 | 800 |" in table
    assert "| resident MB (measured) | weights MB (counted) |" in table


@pytest.mark.served
def test_every_installed_peer_runs_on_the_same_prompts_in_one_table(tmp_path):
    _, missing = peers.parts()
    if missing:  # the README's test command, with no optional engine: CI's second pass has them all
        pytest.skip("needs every peer: " + "; ".join(missing))
    out, printed = tmp_path / "peers.json", io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(RUN + ["--peers", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    print(printed.getvalue()[printed.getvalue().index("Peers:"):])
    assert report["left_out"] == []
    rows = {r["engine"]: r for r in report["rows"]}
    expected = ["ours plain (runner eager)", "ours speculative (model, γ 4)", "llama.cpp's own loop, plain",
                "OpenVINO GenAI, plain", "OpenVINO GenAI, speculative", "llama.cpp's server, plain",
                "llama.cpp's server, draft_model", "llama.cpp's server, ngram", "vLLM, plain", "vLLM, draft_model",
                "vLLM, ngram"]
    assert set(expected) <= set(rows), sorted(rows)
    for name in expected[1:]:  # float32 everywhere: every engine's greedy output is our plain run's
        assert rows[name]["identical"] == ("other weights" if name.startswith("vLLM") else "2/2"), (name, rows[name])
        assert rows[name]["tok_s"] > 0
        assert rows[name]["resident_mb"] > 0, name  # each loop's first call and each server's processes hold some
    for name in ("OpenVINO GenAI, speculative", "llama.cpp's server, draft_model", "vLLM, draft_model"):
        assert 0 < rows[name]["acceptance"] <= 1
    assert set(report["reports"]) == {"ours", "llama-server", "vllm"}
    assert "| engine | tok/s | decode tok/s | × ours plain |" in printed.getvalue()
