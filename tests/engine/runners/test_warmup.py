"""The compiled runner's warm-up (engine/runners/warmup.py) on the tiny pair in float32: it compiles
the shapes a run meets, once per model and shape, yielding progress in order; a second warm-up
compiles nothing, and a run afterwards (chain or tree, a prompt shorter than any bucket) compiles
nothing either. In the app, a race with runner compiled shows the compile's progress in its status
box right after the pair loads, and its stats panel shows the compile seconds beside the timings.

The models here are built for this file (not the session's pair), so their compiled steps start
empty whatever ran before."""

from __future__ import annotations

import html
import os
import re
from dataclasses import replace

import gradio as gr
import pytest
import torch

from playground.app.race import tab as tab_race
from playground.app.race.tab import RaceForm, handle
from playground.app.shared.context import build_context
from playground.config import RunConfig, cache_dir
from playground.engine import factory
from playground.engine.events import output_tokens
from playground.engine.generate import generate
from playground.engine.runners import compile_seconds
from playground.engine.runners.compiled import steps_of, use_disk_cache
from playground.engine.runners.warmup import (
    DRAFT,
    TARGET,
    run_capacities,
    run_shapes,
    warm_model,
    warm_up,
)
from playground.models.cpu_quant import quantize_for_cpu
from playground.models.tiny import tiny_pair

CHAIN = RunConfig(pair="tiny", runner="compiled", gamma=4, max_new_tokens=24)
TREE = replace(CHAIN, speculation="tree", tree_budget=7, tree_depth=3, tree_branching=2)
SHORT_PROMPT = [5, 9, 2, 7]  # its first forward (4 + γ rows) fits a bucket: it must still run uncompiled


@pytest.fixture(scope="module")
def models():
    target, draft, _ = tiny_pair(seed=0)
    return target, draft


def compiled_rows(model) -> list[int]:
    return sorted(key[0] for key in steps_of(model).seconds)


def test_the_shapes_a_run_meets():
    assert run_shapes(CHAIN) == {TARGET: (1, 8), DRAFT: (1, 2)}  # γ + 1 = 5 rides on 8
    assert run_shapes(replace(CHAIN, adaptive=True, gamma_max=6)) == {TARGET: (1, 8), DRAFT: (1, 2)}
    assert run_shapes(TREE) == {TARGET: (1, 8), DRAFT: (1, 4)}  # 7 nodes + 1; depth + 1 and 4 frontier nodes
    assert run_shapes(replace(CHAIN, drafter="prompt_lookup", gamma=40)) == {TARGET: (1,), DRAFT: ()}  # 41: uncompiled
    assert run_capacities(CHAIN, None) == (256,) and run_capacities(CHAIN, 200) == (256,)  # 200 + 24 + 32 fit
    assert run_capacities(CHAIN, 230) == (512,)  # one capacity, taken when the run starts


def test_warm_up_compiles_each_shape_once_in_order_then_nothing(models):
    target, draft = models
    events = list(warm_up(target, draft, CHAIN))
    assert [(e.model, e.index, e.total, e.rows, e.done) for e in events] == [
        (TARGET, 1, 4, 1, False), (TARGET, 1, 4, 1, True), (TARGET, 2, 4, 8, False), (TARGET, 2, 4, 8, True),
        (TARGET, 3, 4, 1, False), (TARGET, 3, 4, 1, True), (TARGET, 4, 4, 8, False), (TARGET, 4, 4, 8, True),
        (DRAFT, 1, 4, 1, False), (DRAFT, 1, 4, 1, True), (DRAFT, 2, 4, 2, False), (DRAFT, 2, 4, 2, True),
        (DRAFT, 3, 4, 1, False), (DRAFT, 3, 4, 1, True), (DRAFT, 4, 4, 2, False), (DRAFT, 4, 4, 2, True)]
    # each shape on a second cache too: a race holds two of each model at once
    assert all(e.capacity == 256 for e in events)
    assert compiled_rows(target) == [1, 8] and compiled_rows(draft) == [1, 2]
    seconds = compile_seconds(target, draft)
    assert seconds == sum(e.seconds for e in events if e.done) > 0  # what each event said, kept with the models
    assert list(warm_up(target, draft, CHAIN)) == []  # kept for the session: nothing compiles twice
    assert compile_seconds(target, draft) == seconds


def test_runs_after_the_warm_up_compile_nothing(models):
    target, draft = models
    list(warm_up(target, draft, CHAIN))
    tree_events = list(warm_up(target, draft, TREE))  # only what the tree adds: its draft's 4-row shape
    assert [(e.model, e.rows) for e in tree_events if e.done] == [(DRAFT, 4), (DRAFT, 4)]  # on both its caches
    keys = {m: set(steps_of(m).seconds) for m in models}
    seconds, frames = compile_seconds(target, draft), dict(torch._dynamo.utils.counters["frames"])
    expected = output_tokens(list(generate(target, SHORT_PROMPT, factory.spec_config(replace(CHAIN, runner="eager")))))
    for run in (CHAIN, TREE):
        config = factory.spec_config(run)
        assert output_tokens(list(generate(target, SHORT_PROMPT, config))) == expected  # the baseline
        assert output_tokens(list(generate(target, SHORT_PROMPT, config, factory.make_drafter(run, factory.Models(target, draft))))) == expected
    hybrid = replace(CHAIN, drafter="hybrid", max_new_tokens=48)  # the tiny target loops: the suffixes match far
    looped = list(generate(target, SHORT_PROMPT, factory.spec_config(hybrid),
                           factory.make_drafter(hybrid, factory.Models(target, draft))))
    assert max(len(e.drafts) for e in looped) <= 7  # held to the 8-row step recorded, past γ 4 at most
    assert compile_seconds(target, draft) == seconds
    assert {m: set(steps_of(m).seconds) for m in models} == keys
    assert dict(torch._dynamo.utils.counters["frames"]) == frames  # not even a recompile


def test_the_warm_up_calls_each_shape_until_its_cuda_graph_is_recorded_and_replayed(monkeypatch):
    """Under CUDA graph trees a step's first call warms its kernels, the second records the graph, the
    third replays it: each warmed shape gets those three calls, so no recording lands in the first
    timed step, and a run's next step of that shape is a plain fourth call. The step stands in for its
    compiled self (counted, not compiled), and its repeats leave the cache as one call would."""
    from playground.engine.kvcache import CachedModel
    from playground.engine.runners import compiled
    from playground.engine.runners.static import step

    calls: dict[str, int] = {}

    def counted(name, mode, own_buffer):
        def run(*args):
            calls[name] = calls.get(name, 0) + 1
            return step(*args)
        return run

    monkeypatch.setattr(compiled, "compile_step", counted)
    target = tiny_pair(seed=2)[0]
    list(warm_model(target, (1, 8), None, run_capacities(CHAIN, None)))
    assert calls == {"step_1x256": compiled.RECORD_CALLS, "step_8x256": compiled.RECORD_CALLS} and compiled.RECORD_CALLS >= 3
    lm, eager = CachedModel(target, runner="compiled"), CachedModel(target, runner="eager")
    lm.logits_for(SHORT_PROMPT, 1)
    for tokens in (SHORT_PROMPT + [1], SHORT_PROMPT + [1, 2, 3, 4, 5]):
        keep = len(tokens) - len(SHORT_PROMPT)
        assert torch.allclose(lm.logits_for(tokens, keep), eager.logits_for(tokens, keep), atol=1e-5)
    assert calls == {"step_1x256": compiled.RECORD_CALLS + 1, "step_8x256": compiled.RECORD_CALLS + 1}
    assert lm.runner.length == len(lm.tokens) == len(SHORT_PROMPT) + 5


def test_on_a_gpu_each_recording_call_is_a_step_of_its_own(monkeypatch):
    """The CUDA branch of the recording calls: CUDA graph trees are told a new step begins before each
    call (else the calls would nest as one step's), and the write position goes back before each."""
    from playground.engine.kvcache import CachedModel
    from playground.engine.runners import compiled

    runner = CachedModel(tiny_pair(seed=2)[0], runner="compiled").runner
    seen = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: seen.append("begin"))

    def step(*args):  # as the real one: it reads the write position, then moves it past its rows
        seen.append(("call", runner.length, int(runner.cache.layers[0].cumulative_length)))
        for layer in runner.cache.layers:
            layer.cumulative_length.add_(8)

    runner.steps[("key",)] = step
    runner.set_length(5)
    monkeypatch.setattr(runner, "device", torch.device("cuda"))  # a torch.device is made without a GPU
    runner.record(("key",), ())
    assert seen == ["begin", ("call", 5, 5)] * compiled.RECORD_CALLS


def test_a_cpu_quantized_model_warms_up_as_its_runs_call_it():
    """Its kernels (int8 weight-only) have no derivative: a step compiled outside inference mode, as
    a run never calls it, fails to trace; compiled as runs call it, the run afterwards adds nothing."""
    target = tiny_pair(seed=1)[0]
    quantize_for_cpu(target, "int8-cpu")
    events = list(warm_model(target, (1,), None, run_capacities(CHAIN, None)))
    assert [(e.rows, e.done) for e in events] == [(1, False), (1, True)]
    seconds = compile_seconds(target)
    list(generate(target, SHORT_PROMPT, factory.spec_config(replace(CHAIN, max_new_tokens=6))))
    assert compile_seconds(target) == seconds and compiled_rows(target) == [1]


def test_a_static_cache_grown_in_a_forward_still_rolls_back(models):
    """Met by the warm-up's longer caches: a cache the runner grows inside a forward (inference
    mode) is still rolled back in place outside it, so the pool makes its tensors normal ones."""
    target = models[0]
    stranger = tiny_pair(seed=5)[1]  # another pair's draft: rejections, so rollbacks, every few tokens
    prompt = [(7 * i + 3) % 250 for i in range(250)]  # 250 + 4 drafts fit 256; the second step grows it
    run = replace(CHAIN, runner="static", max_new_tokens=12)
    expected = output_tokens(list(generate(target, prompt, factory.spec_config(replace(run, runner="eager")))))
    drafter = factory.make_drafter(run, factory.Models(target, stranger))
    assert output_tokens(list(generate(target, prompt, factory.spec_config(run), drafter))) == expected


def test_no_warm_up_for_other_runners(models):
    target, draft = models
    assert list(warm_up(target, draft, replace(CHAIN, runner="eager"))) == []
    assert list(warm_up(target, draft, replace(CHAIN, runner="static"))) == []


def test_inductor_caches_sit_in_the_playground_cache_unless_the_user_chose(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what importing torchao leaves there
    assert use_disk_cache() == str(cache_dir() / "torchinductor") == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert use_disk_cache() == str(tmp_path / "mine")


# -- the app: compile progress right after the pair loads, compile seconds beside the timings -----


@pytest.fixture(scope="module")
def app():
    ctx = build_context()  # its own pair cache: a freshly loaded tiny pair, nothing compiled yet
    with gr.Blocks():
        view = tab_race.build(ctx)["view"]
    return ctx, view


def knobs(**changes) -> dict:
    return {**{n: getattr(CHAIN, n) for n in RunConfig.names()}, **changes}


def race(ctx, view, prompt: str, knobs: dict):
    """The race's Run handler on a form filled as the page would."""
    return handle(ctx, view, RaceForm(prompt, "", knobs))


def text(shown: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", shown)).strip()


def test_a_compiled_race_shows_compile_progress_then_its_seconds_beside_the_timings(app):
    ctx, view = app
    outputs = list(race(ctx, view, "def fibonacci(n):", knobs()))
    statuses = [text(o[view.status]) for o in outputs]
    first_frame = next(i for i, o in enumerate(outputs) if view.baseline in o)
    compiling = [i for i, s in enumerate(statuses) if "Compiling" in s or "Compiled" in s]
    loading = [i for i, s in enumerate(statuses) if "Loading" in s]
    assert loading and compiling and max(loading) < min(compiling) and max(compiling) < first_frame
    said = [statuses[i] for i in compiling]
    assert said[0].startswith("Compiling target step 1 of 4 (shape 1") and "<progress" in outputs[compiling[0]][view.status]
    assert any(s.startswith("Compiled draft step 2 of 4 (shape 2") for s in said)
    last = outputs[-1]
    assert "Done" in last[view.status] and "identical to the baseline" in last[view.stats]
    assert "s compiling this pair" in html.unescape(last[view.stats])
    again = list(race(ctx, view, "def fibonacci(n):", knobs()))  # kept for the session
    assert not any("Compiling" in html.unescape(o[view.status]) for o in again)
    assert "s compiling this pair" in html.unescape(again[-1][view.stats])


def test_a_race_whose_prompt_fills_the_first_cache_compiles_the_longer_one_first(app):
    ctx, view = app
    prompt = "def fibonacci(n):\n" * 13  # 234 bytes and the chat template: the run steps past 256 entries
    outputs = list(race(ctx, view, prompt, knobs(max_new_tokens=8)))
    said = [text(o[view.status]) for o in outputs if "Compil" in text(o[view.status])]
    assert any("512-entry cache" in s for s in said)  # the longer cache's shapes, before the race
    assert "Done" in outputs[-1][view.status]
    again = list(race(ctx, view, prompt, knobs(max_new_tokens=8)))
    assert not any("Compil" in text(o[view.status]) for o in again)


def test_an_eager_race_compiles_nothing_and_says_nothing_of_it(app):
    ctx, view = app
    outputs = list(race(ctx, view, "def add(a, b):", knobs(runner="eager", max_new_tokens=8)))
    assert not any("Compil" in html.unescape(o[view.status]) for o in outputs)
    assert "Done" in outputs[-1][view.status] and "compiling" not in outputs[-1][view.stats]
