"""The draft-rows command on the tiny pair: it runs, counts the rows a run's draft forwards read as the
engine feeds them, and writes its report whole (the figures are timings: read, never asserted on)."""

import json

from playground.measure.hardware import draft_rows


def test_it_reports_one_row_two_rows_and_the_run_on_the_tiny_pair(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert draft_rows.main(["--pair", "tiny", "--gamma", "1", "--new-tokens", "12", "--repeats", "1",
                            "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["pair"] == "tiny" and report["gamma"] == 1 and 0.0 <= report["alpha"] <= 1.0
    assert min(report[k] for k in ("c_one_row", "c_two_rows", "c_in_run", "c_forecast")) > 0
    # at γ 1 every draft forward but the prompt's is a call's first: two rows exactly after an accepted draft
    assert 0.0 < report["two_row_share"] < 1.0
    assert "draft_cost's forecast" in capsys.readouterr().out
