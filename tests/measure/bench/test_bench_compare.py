"""`python -m playground.bench --target-quantizations ...`: faster than what, in one run, on the tiny pair."""

from __future__ import annotations

import json

import pytest

from playground.measure.bench import cli


@pytest.mark.parametrize("args, message", [
    (["--target-quantizations", "none,int3"],
     "argument --target-quantizations: expected each of auto, none, nf4, int8, int8-cpu, int4-cpu, got 'int3'"),
    (["--target-quantizations", "none", "--target-quantization", "nf4"],
     "give either --target-quantization or --target-quantizations"),
    (["--target-quantizations", "none", "--csv", "OUT/r.csv"], "argument --csv: not with --target-quantizations"),
])
def test_bad_comparisons_name_the_flag_and_write_nothing(tmp_path, capsys, args, message):
    args = [a.replace("OUT", str(tmp_path)) for a in args]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--pair", "tiny", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_target_quantization_plain_and_speculative_in_one_table(tmp_path, capsys):
    out = tmp_path / "c.json"
    code = cli.main(["--pair", "tiny", "--target-quantizations", "none,int8-cpu,int4-cpu", "--categories",
                     "coding", "--limit", "1", "--max-new-tokens", "12", "--repeats", "1", "--warmup", "0",
                     "--sweep", "gamma=1,3", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Faster than what?" in printed and "v(k) of target int4-cpu" in printed
    report = json.loads(out.read_text())
    table = report["comparison"]
    assert {r["target_quantization"] for r in table["plain"]} == {"none", "int8-cpu", "int4-cpu"}
    assert table["fastest_plain"]["tok_s"] == max(r["tok_s"] for r in table["plain"])
    spec = table["speculative"]
    assert len(spec) == 6 and {(r["target_quantization"], r["gamma"]) for r in spec} == {
        (q, g) for q in ("none", "int8-cpu", "int4-cpu") for g in (1, 3)}
    assert table["best_speculative"] == spec[0] and spec[0]["tok_s"] == max(r["tok_s"] for r in spec)
    own = {r["target_quantization"]: r["tok_s"] for r in table["plain"]}
    for r in spec:
        assert r["over_own_plain"] == pytest.approx(r["tok_s"] / own[r["target_quantization"]])
        assert r["identical"] is True  # lossless against its own target's plain run (float32 tiny)
        assert r["v_curve"] == pytest.approx(table["curves"][r["target_quantization"]]["v"][r["gamma"]])
        assert r["alpha"] >= 0 and r["c"] > 0 and r["verify_cost"] > 0
    for q, rep in report["reports"].items():
        assert rep["models"]["target"]["quantization"] == q
