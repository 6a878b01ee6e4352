"""auto's choice per role and context (issue 52, item 6): a step's attention reads every filled entry,
so the runner fastest at 128 entries need not be at 512. The choice is timed with the cache filled to
half the run's context bucket, kept under the model's role and that bucket, and the cache models of a
run step on what was chosen for their role at the run's length (the nearest measured where that was
not). Driven as test_auto_gpu.py drives auto on a card: stand-ins for the card and the clock, each
runner's forward advancing the fake clock by a planted cost that grows with the entries it reads;
the compiled runner itself runs for real (inductor on the CPU) on tiny float32 models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.generate import start
from playground.engine.kvcache import CachedModel
from playground.engine.runners import auto, choice, resolve
from playground.engine.runners.warmup import Choosing, warm_up
from playground.models.tiny import tiny_pair

# planted: compiled's step is cheap to launch and dear per entry read, eager's the other way round, so
# compiled leads at 128 entries (10.4 ms against 19.1) and eager at 512 (29.6 against 19.5)
COST_MS = {"eager": (19.0, 0.001), "compiled": (4.0, 0.05)}
RUN = RunConfig(pair="tiny", runner="auto", gamma=3, max_new_tokens=12)


@pytest.fixture
def card(on_a_card):
    """The card stood in for (conftest.on_a_card), a forward costing its runner's launch and the entries
    its cache holds."""
    return on_a_card(lambda runner: COST_MS[runner.name][0] + COST_MS[runner.name][1] * runner.length)


def fresh():
    target, draft, _ = tiny_pair(seed=23)
    return target, draft


def test_the_choice_is_timed_at_the_runs_context_and_kept_per_bucket_and_role(card):
    target, _ = fresh()
    short = auto.record(target, None, verifies=True, context=200)
    long = auto.record(target, None, verifies=True, context=700)
    assert (short["runner"], short["filled"], short["role"]) == ("compiled", 128, "target")
    assert (long["runner"], long["filled"]) == ("eager", 512)  # timed after 512 entries: eager leads there
    assert long["step_ms"]["compiled"] > short["step_ms"]["compiled"]
    assert auto.record(target, None, verifies=True, context=1000) is long  # the same bucket: not timed again
    assert choice.recorded(target, None, role=choice.DRAFT, context=200) is None  # a draft's is its own
    choice.SEEN.clear()  # as a new process: both read back from the file, each under its own key
    assert choice.recorded(target, context=100)["runner"] == "compiled"
    assert choice.recorded(target, context=1024)["runner"] == "eager"


def test_resolve_reads_the_runs_bucket_else_the_nearest_measured_else_the_table(card):
    target, _ = fresh()
    assert resolve("auto", "cuda", model=target, context=700) == "eager"  # nothing measured: the table's
    auto.record(target, None, verifies=True, context=200)  # compiled, at 256
    assert resolve("auto", "cuda", model=target, context=700) == "compiled"  # the nearest measured
    assert resolve("auto", "cuda", model=target, context=700, role=choice.DRAFT) == "compiled"  # the other role's
    auto.record(target, None, verifies=True, context=700)  # eager, at 1024
    assert resolve("auto", "cuda", model=target, context=700) == "eager"
    assert resolve("auto", "cuda", model=target, context=5000) == "eager"  # 4096: 1024 is nearer than 256
    assert resolve("auto", "cuda", model=target, context=100) == "compiled"


def test_a_runs_cache_models_step_on_what_was_chosen_for_their_role_at_its_length(card):
    target, draft = fresh()
    for context in (200, 700):
        auto.record(target, None, verifies=True, context=context)
    choice.remember(draft, None, 1, {"runner": "compiled", "step_ms": {}}, role=choice.DRAFT, context=200)
    drafter = factory.make_drafter(RUN, factory.Models(target, draft))
    config = factory.spec_config(RUN)
    short = start(target, drafter, config, (), 200)
    assert short.lm.runner.name == "compiled" and drafter.lm.runner.name == "compiled"
    long = start(target, drafter, config, (), 700)
    assert long.lm.runner.name == "eager"  # the target's choice at 1024
    assert drafter.lm.runner.name == "compiled"  # the draft's nearest: its own role's, at 256
    assert CachedModel(target).runner.name == "compiled"  # no length said: a short run's


def test_the_warm_up_measures_at_the_races_length_and_a_short_warm_up_run_stands_for_it(card):
    target, draft = fresh()
    auto.record(target, None, verifies=True, context=200)  # compiled, at 256: an earlier, shorter race's
    run = replace(RUN, max_new_tokens=300)
    chose = [e.choice for e in warm_up(target, draft, run, prompt_tokens=400) if isinstance(e, Choosing) and e.done]
    assert [(c["role"], c["filled"], c["runner"]) for c in chose] == [("target", 512, "eager"), ("draft", 512, "eager")]
    drafter = factory.make_drafter(run, factory.Models(target, draft))
    short = replace(factory.spec_config(run), max_new_tokens=4)  # a short run of the race's last 100 tokens
    assert start(target, drafter, short, (), 104).lm.runner.name == "compiled"  # its own length: 256's
    stand_in = replace(short, runners_for=700)  # the race's 400 + 300, as the race's short warm-up says
    assert start(target, drafter, stand_in, (), stand_in.chosen_for(100)).lm.runner.name == "eager"
    assert drafter.lm.runner.name == "eager"
