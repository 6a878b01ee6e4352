"""The GPU runners script (measure/hardware/gpu_runners.py) and its wait counter (syncs.py), on the CPU:
the CUDA counter with torch's sync debug mode standing in, the CPU stand-in counting host reads and
putting torch.Tensor back as it was, and the script's engine, syncs and quantized checks on tiny shapes
(--cpu-smoke), so what a lent GPU will run has run here first."""

import json
import warnings

import pytest
import torch

from playground.measure.hardware import gpu_runners, syncs


def test_the_cpu_stand_in_counts_each_read_of_a_value_and_puts_the_tensor_methods_back():
    before = {name: torch.Tensor.__dict__.get(name) for name in syncs.READS}
    t = torch.tensor([1.5, 2.0])
    with syncs.host_reads() as count:
        t.sum().item(), t.tolist(), float(t[0]), int(t[1]), bool(t[0] > 1), t.cpu(), t.numpy()
        assert count() == len(syncs.READS)
        t + t  # no read
        assert count() == len(syncs.READS)
    assert {name: torch.Tensor.__dict__.get(name) for name in syncs.READS} == before
    assert float(t[0]) == 1.5


def test_on_cuda_the_sync_debug_modes_warnings_are_counted_and_the_mode_put_back(monkeypatch):
    """The CUDA branch, with torch's sync debug mode standing in: each synchronizing operation warns
    (every time, not only at a location's first), and the mode is restored after."""
    modes = [0]
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: modes.append(mode))
    with syncs.counting("cuda") as count:
        for _ in range(3):
            warnings.warn("called a synchronizing CUDA operation")
        warnings.warn("something else")
        assert count() == 3 and modes[-1] == "warn"
    assert modes[-1] == 0


def test_waits_are_counted_between_events_leaving_out_the_first_step():
    counter = [0]

    def events():
        for reads in (9, 2, 3, 2):  # the first step also reads the prompt
            counter[0] += reads
            yield reads

    counts = syncs.per_step(events(), lambda: counter[0])
    assert counts == [2, 3, 2]
    assert syncs.summary(counts) == {"median": 2, "max": 3, "steps": 3} and syncs.summary([]) == {"steps": 0}


def test_the_scripts_new_checks_run_on_tiny_shapes(tmp_path):
    """engine: the first race and a second timed after the app's warm-up; syncs: the waits per step
    of each method; quantized: nf4 and int8 through the app's loader, with the compiled runner's refusal."""
    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--checks", "engine,syncs,quantized", "--runners", "eager",
                             "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {"warm_up_s", "first_race_s", "second_race_s", "first_race_over_second"} <= set(report["engine"]["eager"])
    assert set(report["syncs"]) == {"eager plain", "eager greedy chain", "eager sampled chain"}
    for row in report["syncs"].values():
        assert row["steps"] > 0 and row["max"] >= row["median"] > 0 and row["counts"] == "host reads (CPU stand-in)"
    assert set(report["quantized"]) == {"nf4 float32", "int8 float32"}
    for name, row in report["quantized"].items():
        assert row["compiled_runner"].startswith(f"refused: runner 'compiled' cannot run a bitsandbytes model "
                                                 f"(quantization '{name.split()[0]}')")
        assert row["syncs_per_step"]["chain"]["gamma"] == 4 and row["chain_identical"] == [True]
    assert "held" not in report["args"]


def test_the_full_run_orders_what_issue_47_wants_first_and_fits_its_budget():
    args = gpu_runners.options([])
    assert args.checks.split(",")[:3] == ["steps", "auto", "syncs"] and args.alpha == 0.8
    assert args.budget_s <= 300 and args.runners == ("eager", "compiled")  # ends within 6 minutes on an H200
    assert set(args.shapes) == {"0.5b", "1.5b", "7b"} and "quantized" not in args.checks  # needs bitsandbytes


def test_steps_and_auto_run_on_tiny_shapes_with_the_gpus_candidates(tmp_path):
    """steps: each runner's plain step and v(k), c and the forecast at α 0.8 at its best γ; auto (the models
    counting as on a card, "CPU stand-in"): a choice for the target and the draft, and both planted
    failures fall back on eager with their reasons, nothing compiled left for the planted head."""
    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--checks", "steps,auto", "--runners", "eager,compiled",
                             "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    forecast = report["steps"]["predicted"]
    assert forecast["assumed_alpha"] == 0.8
    for runner in ("eager", "compiled"):
        row = forecast[f"tiny+tiny-draft {runner}"]
        assert row["c"] > 0 and 0 <= row["gamma"] <= 4 and row["speedup_same_runner"] >= 1.0
    assert report["steps"]["tiny"]["compiled"]["compile_s"] > 0 == report["steps"]["tiny"]["eager"]["compile_s"]
    auto = report["auto"]
    for model in ("target", "draft"):
        assert auto[model]["runner"] in ("eager", "compiled") and set(auto[model]["step_ms"]) <= {"eager", "compiled"}
    raised, moved = auto["planted: a compile that raises"], auto["planted: a compiled step whose argmax is not eager's"]
    assert raised["runner"] == moved["runner"] == "eager"
    assert "planted: an op the compiler cannot trace" in raised["dropped"]["compiled"]
    assert "argmax is token 0" in moved["dropped"]["compiled"]
    assert raised["steps_left_for_this_head"] == moved["steps_left_for_this_head"] == 0
