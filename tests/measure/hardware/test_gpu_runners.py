"""The GPU runners script (measure/hardware/gpu_runners.py), its budget (gpu_budget.py), its app check
(gpu_app.py) and its wait counter (syncs.py), on the CPU: the CUDA counter with torch's sync debug mode
standing in, the CPU stand-in counting host reads and putting torch.Tensor back as it was; the whole
default call on tiny shapes (--cpu-smoke) in its order, within its budget, so what a lent GPU will run
has run here first; the race as the app runs it recording nothing inside its timed steps once auto
keeps compiled (a planted clock makes it), and the count seeing recordings where a warm-up leaves a
cache out; a call past its budget skipping each check with why; and how the budget reckons a row."""

import json
import warnings
from types import SimpleNamespace

import pytest
import torch

from playground.engine.runners import timing, warmup
from playground.engine.runners.compiled import CompiledRunner, Steps
from playground.engine.runners.eager import EagerRunner
from playground.engine.runners.static import state_of
from playground.measure.hardware import gpu_budget, gpu_runners, syncs

ORDER = ["app", "identity", "steps", "syncs", "fallback", "contexts"]  # what matters most first (issue 52, items 11, 6)


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


def test_the_full_run_puts_the_apps_own_path_first_and_fits_eight_minutes():
    args = gpu_runners.options([])
    assert args.checks.split(",") == ORDER and [name for name, _ in gpu_runners.CHECKS][:6] == ORDER
    assert args.budget_s <= 480 and args.runners == ("eager", "compiled")  # the whole call, cold
    assert args.gamma == 3  # the default pair's: its verification is the 4-row step auto times
    assert args.shapes[0] == "1.5b" and set(args.shapes) == {"0.5b", "1.5b", "7b"}
    assert "quantized" not in args.checks and "engine" not in args.checks  # asked by name only
    with pytest.raises(SystemExit):
        gpu_runners.options(["--checks", "auto"])  # the old name: its choices are the app check's now


def test_the_smoke_run_reports_every_check_in_its_order_within_its_budget(tmp_path):
    """The default call on tiny shapes: app, identity, steps, syncs, fallback and contexts, in that order, none
    skipped, each with its compile seconds; the app check's two races as the app runs them, with the
    recordings inside their timed steps counted (ours and torch's), on the model thread."""
    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [key for key in report if key in dict(gpu_runners.CHECKS)] == ORDER
    for name in ORDER:
        assert isinstance(report[name], dict) and isinstance(report[name]["compile_s"], float), name
        assert not left_out(report[name]), (name, left_out(report[name]))
    app = report["app"]
    assert len(app["races"]) == 2 and {"first_race_speedup", "second_race_speedup"} <= set(app)
    for race in app["races"]:
        assert set(race["while_timed"]) == set(race["in_short_warm_up"]) == {"recorded", "torch_compiled",
                                                                             "torch_recorded"}
    assert {"recorded_while_timed", "torch_compiled_while_timed", "torch_recorded_while_timed"} <= set(app)
    assert app["threads"] and all(name.startswith("model-") for name in app["threads"])  # the app's one thread
    assert set(app["races"][0]["choices"]) == {"target", "draft"} and app["races"][1]["choices"] == {}
    assert app["races"][0]["in_warm_up"]["torch_compiled"] > 0  # torch's hook counts: auto compiled a candidate
    assert "verify_ms" in app["races"][0]["choices"]["target"]  # auto timed the target's verification too
    assert all(row["identical"] for key, row in report["identity"].items() if key != "compile_s")
    assert report["steps"]["predicted"]["assumed_alpha"] == 0.8
    assert report["steps"]["tiny"]["eager"]["compile_s"] == 0  # a row's own compiles, not the model's so far
    for key, row in report["syncs"].items():
        if key != "compile_s":
            assert row["steps"] > 0 and row["max"] >= row["median"] > 0
    raised = report["fallback"]["planted: a compile that raises"]
    assert raised["runner"] == "eager" and raised["steps_left_for_this_head"] == 0
    short, long = report["contexts"]["up to 256 entries"], report["contexts"]["up to 1024 entries"]
    assert (short["filled"], long["filled"]) == (128, 512) and short["role"] == long["role"] == "target"
    assert "verify_ms" in long and long["runner"] in long["step_ms"]
    assert "held" not in report["args"]


def left_out(result) -> list:
    """Every row of a check's result that was skipped or raised (a string saying so, or an error row)."""
    if isinstance(result, str):
        return [result] if result.startswith("skipped") else []
    if isinstance(result, dict):
        return ([result["error"]] if "error" in result else []) + \
            [found for value in result.values() for found in left_out(value)]
    if isinstance(result, list):
        return [found for value in result for found in left_out(value)]
    return []


def test_a_call_past_its_budget_skips_each_check_and_says_why(tmp_path):
    """No second left: every check, in order, is skipped before it starts (nothing is built), its reason
    written where its result would be."""
    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--budget-s", "0", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [key for key in report if key in dict(gpu_runners.CHECKS)] == ORDER
    for name in ORDER:
        assert report[name].startswith("skipped: ") and "of the call's 0 s gone" in report[name], report[name]


@pytest.fixture
def compiled_wins(monkeypatch):
    """auto keeps compiled on the CPU stand-in: each forward of a runner advances auto's clock by a
    planted step time (eager's launch-bound 19 ms, a replayed graph's 4 ms); nothing else is timed so."""
    now = [0.0]
    monkeypatch.setattr(timing, "clock", lambda device: now[0])
    for runner, ms in ((EagerRunner, 19.0), (CompiledRunner, 4.0)):
        def timed(self, *args, forward=runner.forward, ms=ms, **kwargs):
            now[0] += ms / 1000
            return forward(self, *args, **kwargs)
        monkeypatch.setattr(runner, "forward", timed)


def app_check(tmp_path) -> dict:
    out = tmp_path / "app.json"
    assert gpu_runners.main(["--cpu-smoke", "--checks", "app", "--json", str(out)]) == 0
    return json.loads(out.read_text())["app"]


def test_the_race_as_the_app_runs_it_records_nothing_while_timed(tmp_path, compiled_wins):
    """Issue 52, items 1 and 11: after the page's warm-up, neither race's plain nor speculative run records
    a graph (or compiles a step) inside its timer, and the short warm-up before it records none either."""
    app = app_check(tmp_path)
    assert app["runner"] == {"target": "compiled", "draft": "compiled"}
    assert app["races"][0]["shapes_warmed"] > 0 and app["races"][0]["in_warm_up"]["torch_compiled"] > 0
    for race in app["races"]:
        assert race["while_timed"] == race["in_short_warm_up"] == {"recorded": 0, "torch_compiled": 0,
                                                                    "torch_recorded": 0}
    assert app["recorded_while_timed"] == app["torch_compiled_while_timed"] == 0


def test_the_count_sees_a_graph_recorded_while_timed(tmp_path, compiled_wins, monkeypatch):
    """The check can fail: a warm-up that records each shape on one cache only (as before issue 52, item 1)
    leaves the speculative run's second cache to be recorded inside the first race's timed steps."""
    real = warmup.warm_model
    monkeypatch.setattr(warmup, "warm_model", lambda *args, copies=1, **kwargs: real(*args, copies=1, **kwargs))
    app = app_check(tmp_path)
    assert app["runner"]["target"] == "compiled"
    assert app["races"][0]["while_timed"]["recorded"] > 0 and app["recorded_while_timed"] > 0


def test_the_budget_skips_a_row_whose_compiles_would_end_past_it_and_says_why():
    """A row's need: its new shapes' layers at the rate the deepest model compiled so far (a guess before
    any), plus its running; a shallow model's rate does not stand for a deep one's."""
    now = [300.0]
    budget = gpu_budget.Budget(480, 15, started=0.0, clock=lambda: now[0])
    deep, shallow = layered(28), layered(4)
    said = budget.skip([(deep, 3)])  # 84 layers at the cold guess of 2 s each, and 15 s: 183 s from 300 s
    assert said.startswith("skipped: 300 s of the call's 480 s gone") and "84 layers" in said and "guess" in said
    assert budget.skip() is None  # a row that compiles nothing fits
    compiled(deep, 28.0), compiled(shallow, 12.0)  # 1 s a layer deep; 3 s a layer shallow (fixed costs)
    budget.learn(shallow, deep)
    assert budget.skip([(deep, 3)]) is None  # 84 s and 15 s: 399 s, within 480
    now[0] = 400.0
    assert "at 1.0 s a layer, as this call compiled" in budget.skip([(deep, 3)])


def layered(layers: int):
    return SimpleNamespace(config=SimpleNamespace(num_hidden_layers=layers))


def compiled(model, seconds: float) -> None:
    """A model that compiled one shape in `seconds`."""
    steps = state_of(model).steps = Steps()
    steps[(1, 256, None)], steps.seconds[(1, 256, None)] = object(), seconds


def test_new_shapes_counts_the_buckets_a_model_has_not_compiled():
    model = layered(4)
    assert gpu_budget.new_shapes(model, range(1, 6)) == 4  # 1, 2, 4 and 8 rows
    compiled(model, 1.0)
    assert gpu_budget.new_shapes(model, range(1, 6)) == 3 and gpu_budget.new_shapes(model, (1,), 512) == 1


def test_the_named_checks_run_on_tiny_shapes(tmp_path):
    """engine: the benchmark's path, per runner, with the oracle; quantized: nf4 and int8 through the app's
    loader, with the compiled runner's refusal; each with its compile seconds."""
    out = tmp_path / "runners.json"
    assert gpu_runners.main(["--cpu-smoke", "--checks", "engine,quantized", "--runners", "eager",
                             "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    engine = report["engine"]
    assert engine["compile_s"] == 0 and engine["eager"]["chain_identical"] == [True]
    assert {"oracle_speedup", "chain_vs_fastest_plain"} <= set(engine["eager"])
    assert set(report["quantized"]) == {"nf4 float32", "int8 float32", "compile_s"}
    for name, row in report["quantized"].items():
        if name == "compile_s":
            continue
        assert row["compiled_runner"].startswith(f"refused: runner 'compiled' cannot run a bitsandbytes model "
                                                 f"(quantization '{name.split()[0]}')")
        assert row["syncs_per_step"]["chain"]["gamma"] == 3 and row["chain_identical"] == [True]
