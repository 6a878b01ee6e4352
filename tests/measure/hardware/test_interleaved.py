"""The interleaved command on the tiny pair: every drafter and the plain run on each prompt in turn, the
speedups made from medians over the plain run's, and its report written whole (the figures are timings:
read, never asserted on, except that they are made from what was timed)."""

import json

import pytest

from playground.measure.hardware import interleaved


def test_it_runs_each_cell_on_each_prompt_and_reports_every_category(tmp_path, capsys):
    out = tmp_path / "runs.json"
    assert interleaved.main(["--pair", "tiny", "--categories", "coding,writing,rag", "--limit", "1", "--drafters",
                             "model:1,hybrid:2", "--new-tokens", "6", "--repeats", "2", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())
    assert sorted(key.split(":")[0] for key in runs) == ["coding", "writing"]  # rag's prompt: past the tiny context
    assert all(set(r) == {"plain", "model:1", "hybrid:2"} and all(len(t) == 2 for t in r.values()) for r in runs.values())
    said = capsys.readouterr().out
    assert "coding:" in said and "writing:" in said and "the hybrid's best over model:1's" in said
    assert "rag #" in said and "skipped: prompt is" in said


def test_speedups_are_the_plain_median_over_each_cells_median_averaged_over_prompts():
    seconds = {("coding", "1"): {"plain": [4.0, 9.0, 4.0], "a": [2.0, 2.0, 8.0]},
               ("coding", "2"): {"plain": [3.0], "a": [3.0]}}
    assert interleaved.speedups(seconds) == {"coding": {"a": pytest.approx((2.0 + 1.0) / 2)}}


def test_a_bad_drafter_list_is_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        interleaved.main(["--drafters", "model"])
    assert "--drafters" in capsys.readouterr().err
    assert interleaved.main(["--drafters", "telepathy:1", "--pair", "tiny"]) == 2
    assert "--drafters: unknown telepathy" in capsys.readouterr().err
