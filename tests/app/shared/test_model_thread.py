"""Every forward of a GPU's models on one long-lived thread (engine/model_thread.py; issue 52, item 2):
torch keeps compiled steps' graph state per host thread, and Gradio runs a handler's steps on whatever
worker is free, a lockstep job on a thread of its own. Driven on the CPU with the thread forced on
(`always`): the thread that calls the tiny target's forward is recorded across a warm-up, two races
started from two different threads, a step-through step and a Theory measurement (a lockstep job)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr
import pytest
from transformers.models.qwen2 import modeling_qwen2

from playground.app.race import tab as race
from playground.app.shared.context import build_context
from playground.engine.model_thread import ModelThread
from playground.app.stepthrough import tab as stepthrough
from playground.app.theory import tab as theory
from playground.config import RunConfig


@pytest.fixture
def app(monkeypatch):
    ctx = build_context()
    ctx.frame_every, ctx.model_thread = 0.0, ModelThread(always=True)
    with gr.Blocks():
        views = SimpleNamespace(race=race.build(ctx)["view"], step=stepthrough.build(ctx)["view"],
                                theory=theory.build(ctx)["view"])
    callers = []
    real = modeling_qwen2.Qwen2ForCausalLM.forward

    def recorded(self, *args, **kwargs):
        callers.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(modeling_qwen2.Qwen2ForCausalLM, "forward", recorded)
    yield ctx, views, callers
    ctx.model_thread.close()


def knobs(**changes) -> dict:
    return {**{n: getattr(RunConfig(), n) for n in RunConfig.names()}, "pair": "tiny", "max_new_tokens": 6,
            "runner": "static", "gamma": 3, **changes}


def in_a_thread(work) -> None:
    """Run `work` to its end in a new thread, as a Gradio worker would."""
    failed = []
    thread = threading.Thread(target=lambda: failed.extend(catch(work)))
    thread.start()
    thread.join()
    assert not failed, failed


def catch(work) -> list:
    try:
        work()
        return []
    except BaseException as e:  # noqa: BLE001: handed to the test's thread
        return [e]


def test_every_forward_of_two_races_a_step_and_a_measurement_runs_on_one_thread(app):
    ctx, views, callers = app
    for _ in range(2):  # two jobs, each from a thread of its own
        in_a_thread(lambda: list(race.handle(ctx, views.race, race.RaceForm("def add(a, b):", "", knobs()))))
    in_a_thread(lambda: list(stepthrough.handle(ctx, views.step, stepthrough.StepForm("hi", "", None, knobs()))))
    in_a_thread(lambda: list(theory.handle(ctx, views.theory, theory.MeasureForm("def f(n):", "tiny", "model", 0.0,
                                                                                  3, 6))))
    assert callers and set(callers) == {"model-cpu_0"}, sorted(set(callers))


def test_on_a_cpu_nothing_is_handed_over():
    thread = ModelThread()
    here = threading.current_thread().name
    assert thread.run("cpu", lambda: threading.current_thread().name) == here
    assert list(thread.iterate("cpu", iter([1, 2]))) == [1, 2]
    assert thread.run("cuda:0", lambda: threading.current_thread().name) == "model-cuda:0_0"
    assert thread.run("cuda:0", lambda: thread.run("cuda:0", lambda: 7)) == 7  # from its own thread: inline
    thread.close()
