"""Bounded memory: one pair resident (plus an optional warm one) whoever uses it. A paused
step-through run lets go of its models when another tab switches pairs and resumes exactly by
reloading; a load left running by Stop is cancelled by a job for another pair, reused by a job for
the same one. Tiny in-process pairs and a ~250 MB local one; no download."""

from __future__ import annotations

import gc
import html
import textwrap
import threading
import weakref
from types import SimpleNamespace

import gradio as gr
import psutil
import pytest

from playground.models.pair_cache import Cancelled, PairCache
from playground.models.registry import load_registry
from playground.models.tiny import tiny_model, tiny_pair
from playground.app.shared.context import AppContext, Loading
from playground.config import RunConfig
from playground.app.stepthrough.run import Stepper
from playground.app.lab import tab as tab_lab
from playground.app.race import tab as tab_race
from playground.app.stepthrough import tab as tab_stepthrough


def knobs(pair: str, **changes) -> dict:
    settings = RunConfig(pair=pair, max_new_tokens=24, temperature=0.8, seed=1)
    return {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}


def step_handler(ctx, view):
    """The Next step handler as a function of (prompt, text so far, paused run, knobs)."""
    return lambda prompt, so_far, stepper, knobs: tab_stepthrough.handle(
        ctx, view, tab_stepthrough.StepForm(prompt, so_far, stepper, knobs))


def race(ctx, view, prompt: str, knobs: dict):
    return tab_race.handle(ctx, view, tab_race.RaceForm(prompt, "", knobs))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """Two tiny pairs (separate cache entries) and a ~250 MB pair of two local copies of one model."""
    folder = tmp_path_factory.mktemp("models")
    big = tiny_model(259, layers=6, seed=1, hidden=1024)
    big.save_pretrained(folder / "big")
    tiny_pair(seed=0)[2].save_pretrained(folder / "big")
    del big
    path = folder / "models.yaml"
    path.write_text(textwrap.dedent(f"""
        default_pair: tiny
        models:
          big: {{sources: [{{local: {folder / 'big'}}}], dtype: float32}}
          t: {{sources: [{{tiny: target}}], dtype: float32}}
          d: {{sources: [{{tiny: draft}}], dtype: float32}}
        pairs:
          big: {{target: big, draft: big, description: two copies of a ~125 MB model}}
          tiny: {{target: t, draft: d, description: tiny}}
          tiny2: {{target: t, draft: d, description: the same models cached apart}}
    """))
    return path


def new_ctx(config, keep=1) -> AppContext:
    registry = load_registry(config)
    return AppContext(registry, PairCache(registry, keep=keep))


def last(outputs) -> dict:
    *_, final = outputs
    return final


@pytest.fixture(scope="module")
def views(config):
    """The Race, Step-through and Lab tabs' outputs (the handlers' dicts are keyed by these)."""
    with gr.Blocks():
        ctx = new_ctx(config)
        return SimpleNamespace(race=tab_race.build(ctx)["view"], step=tab_stepthrough.build(ctx)["view"],
                               lab=tab_lab.build(ctx)["view"])


def test_paused_step_through_lets_go_on_a_pair_switch_and_resumes_the_same_run(config, views):
    ctx, paused = new_ctx(config), views.step.stepper
    step = step_handler(ctx, views.step)
    stepper = None
    for _ in range(2):
        stepper = last(step("Once upon a time", "", stepper, knobs("tiny")))[paused]
    held = weakref.ref(stepper.pair.target.model)
    last(race(ctx, views.race, "hello", knobs("tiny2", max_new_tokens=4)))  # another tab
    gc.collect()
    assert stepper.released and held() is None, "the paused run still holds the old pair's models"
    assert ctx.cache.resident() == ["tiny2"]
    resumed = last(step("Once upon a time", "", stepper, knobs("tiny")))
    status = html.unescape(resumed[views.step.status])
    assert resumed[paused] is stepper and "freed while this run was paused" in status
    assert "Step 3:" in status
    reference, uninterrupted = None, step_handler(new_ctx(config), views.step)  # never released
    for _ in range(3):
        reference = last(uninterrupted("Once upon a time", "", reference, knobs("tiny")))[paused]
    assert [e.emitted for e in stepper.history] == [e.emitted for e in reference.history]


def test_a_warm_second_pair_keeps_the_paused_run(config, views):
    ctx = new_ctx(config, keep=2)
    step = step_handler(ctx, views.step)
    stepper = last(step("Once upon a time", "", None, knobs("tiny")))[views.step.stepper]
    last(race(ctx, views.race, "hello", knobs("tiny2", max_new_tokens=4)))
    assert not stepper.released and ctx.cache.resident() == ["tiny", "tiny2"]


class GatedCache:
    """A stand-in pair cache whose loads report progress and then wait for the test's go-ahead."""

    def __init__(self):
        self.gate = threading.Event()
        self.started, self.finished, self.cancelled = [], [], []

    def get(self, name, *, progress, **knobs):
        self.started.append(name)
        progress(f"{name}: first part", 0.1)
        self.gate.wait(timeout=60)
        try:
            progress(f"{name}: second part", 0.5)
        except Cancelled:
            self.cancelled.append(name)
            raise
        self.finished.append(name)
        return SimpleNamespace(name=name)


def settings(pair: str) -> RunConfig:
    return RunConfig(pair=pair)


def test_stop_then_another_pair_cancels_the_load_left_running(config):
    cache = GatedCache()
    ctx = AppContext(load_registry(config), cache, wait_report_s=0.05)
    first = ctx.load(settings("big"))
    assert next(first).message == "big: first part"
    first.close()  # Stop: the job ends, its loader thread is still in the middle of loading
    second = ctx.load(settings("tiny"))
    waiting = next(second)
    assert "stopping the load of big left running by Stop" in waiting.message
    cache.gate.set()
    reports = []
    try:
        while True:
            reports.append(next(second))
    except StopIteration as done:
        pair = done.value
    assert pair.name == "tiny" and cache.cancelled == ["big"] and cache.finished == ["tiny"]
    assert all(isinstance(r, Loading) for r in reports)


def test_stop_then_the_same_pair_waits_for_that_load_and_uses_it(config):
    cache = GatedCache()
    ctx = AppContext(load_registry(config), cache, wait_report_s=0.05)
    first = ctx.load(settings("big"))
    next(first)
    first.close()
    again = ctx.load(settings("big"))
    assert "continuing the load of big started before Stop" in next(again).message
    cache.gate.set()
    *_, = (r for r in iter(lambda: next(again, None), None))  # drain; the gate is open now
    assert cache.cancelled == [] and cache.finished[0] == "big"


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


@pytest.mark.slow  # minutes on 2 cores: twenty-five loads, two in five of them ~250 MB
def test_twenty_pair_switches_across_tabs_keep_memory_bounded(config, views, capsys):
    """tiny ↔ big ↔ tiny with int8, through the race, step-through and lab handlers; a paused
    step-through run rides along. Resident memory after the last switch is within 10 % of after the first."""
    ctx = new_ctx(config)
    paused = None
    cycle = [("race", "big"), ("step", "tiny"), ("race", "tiny-int8"), ("lab", "tiny2"), ("step", "big")]
    plan = cycle * 5  # a first round warms one-time allocations (kernels, bitsandbytes), then 20 switches
    after = []
    for tab, name in plan:
        pair, quant = (("tiny", {"target_quantization": "int8"}) if name == "tiny-int8" else (name, {}))
        if tab == "race":
            last(race(ctx, views.race, "hello", knobs(pair, max_new_tokens=4, **quant)))
        elif tab == "step":
            values = knobs(pair, max_new_tokens=8, **quant)
            step = step_handler(ctx, views.step)
            paused = last(step("Once upon a time", "", paused, values))[views.step.stepper]
            assert isinstance(paused, Stepper)
        else:
            last(tab_lab.handle(ctx, views.lab, tab_lab.LabForm("hello", pair, 20, 1.0, 0, 1.0, 0)))
        assert len(ctx.cache.resident()) == 1
        after.append(rss())
    first, final = after[len(cycle):2 * len(cycle)], after[-len(cycle):]  # first and last measured round
    with capsys.disabled():
        print("\nRSS (MiB) after each switch of the first round:", [round(r / 2**20) for r in first],
              "\n                          and of the last round:", [round(r / 2**20) for r in final],
              f"\n  worst change {max(abs(b - a) / a for a, b in zip(first, final)):+.1%}, "
              f"peak {max(after) / 2**20:.0f} MiB")
    for (tab, name), a, b in zip(plan, first, final):
        assert abs(b - a) <= 0.10 * a, f"{tab} on {name}: {a / 2**20:.0f} MiB, then {b / 2**20:.0f} MiB"
