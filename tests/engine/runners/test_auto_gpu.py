"""auto on a GPU (runners/auto.py, choice.py, warmup.choose_on_gpu), driven on the CPU with stand-ins for
the card (its name, the device kind of the models) and for the clock (each runner's forward advances a
fake clock by a planted step time): the faster of eager and compiled is kept and recorded under a key
naming the card; a candidate that raises, or whose first step differs from eager's, is dropped with its
reason and nothing half compiled is kept; another card or another library version measures again; the
warm-up measures, then compiles only what runs compiled, and a race after it compiles nothing. The
compiled runner itself runs for real (inductor on the CPU), on tiny float32 models."""

from __future__ import annotations

import json
import weakref
from dataclasses import replace

import pytest
import torch

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.events import output_tokens
from playground.engine.generate import generate
from playground.engine.kvcache import CachedModel
from playground.engine.runners import auto, choice, compiled, resolve
from playground.engine.runners.compiled import steps_of
from playground.engine.runners.warmup import Choosing, Compiling, warm_up
from playground.models.tiny import tiny_pair

STEP_MS = {"eager": 19.0, "compiled": 4.0}  # planted: a launch-bound eager step, a replayed graph
RUN = RunConfig(pair="tiny", runner="auto", gamma=3, max_new_tokens=12)
PROMPT = [5, 9, 2, 7, 11, 3]


@pytest.fixture
def gpu(on_a_card):
    """The card stood in for (conftest.on_a_card), each forward costing its runner's planted step."""
    return on_a_card(lambda runner: STEP_MS[runner.name])


def fresh():
    """A tiny pair of its own: no compiled step, no cache pool from another test."""
    target, draft, _ = tiny_pair(seed=21)
    return target, draft


def test_the_faster_runner_is_kept_and_recorded_under_a_key_naming_the_card(gpu):
    target, _ = fresh()
    assert resolve("auto", "cuda", model=target) == "eager"  # nothing measured: the table's guess
    made = choice.choice_file
    picked = auto.record(target)
    assert picked["runner"] == "compiled" and picked["step_ms"] == pytest.approx(STEP_MS)
    assert picked["compile_s"] > 0 and "dropped" not in picked
    (key,) = json.loads(made().read_text())
    assert key.startswith(gpu["name"]) and "float32" in key and "torch " in key and "transformers " in key
    assert resolve("auto", "cuda", model=target) == "compiled"
    assert CachedModel(target).runner.name == "compiled"  # a run under auto now steps compiled
    assert "compiled: a plain step 4.0 ms against 19.0 ms on eager; compiling took" in auto.choice_text(picked)


def test_a_candidate_that_raises_falls_back_on_eager_with_its_reason_and_keeps_nothing(gpu, monkeypatch):
    def unsupported(name, mode, own_buffer):
        def step(*args):  # torch.compile traces at the first call: that is where it fails
            raise RuntimeError("planted: an op the compiler cannot trace")
        return step

    monkeypatch.setattr(compiled, "compile_step", unsupported)
    target, _ = fresh()
    lm = CachedModel(target, runner="compiled")
    lm.logits_for(PROMPT, 1)  # a prompt runs uncompiled
    logits = lm.logits_for(PROMPT + [1], 1)  # the step that fails to compile runs uncompiled (issue 52, item 3)
    assert torch.allclose(logits, CachedModel(target, runner="eager").logits_for(PROMPT + [1], 1), atol=1e-5)
    assert not steps_of(target)  # the step that failed to compile is not kept half made
    assert "1-row step at capacity 256 raised RuntimeError: planted" in steps_of(target).failed[(1, 256, None)]
    picked = auto.record(target)
    assert picked["runner"] == "eager" and set(picked["step_ms"]) == {"eager"}
    assert "RuntimeError: planted: an op the compiler cannot trace" in picked["dropped"]["compiled"]
    assert not steps_of(target)  # no half-made step kept
    assert resolve("auto", "cuda", model=target) == "eager"
    assert "compiled dropped: compiling failed: the 1-row step" in auto.choice_text(picked)


def test_a_model_the_compiled_runner_refuses_is_dropped_by_name(gpu):
    target, _ = fresh()
    target.quantization_method = "bitsandbytes"  # what a bitsandbytes model says of itself
    picked = auto.record(target)
    assert picked["runner"] == "eager"
    assert "cannot run a bitsandbytes model" in picked["dropped"]["compiled"]


@pytest.mark.parametrize("perturb, said", [
    (lambda out: out + 1e-3, "differ from eager's by up to 0.001"),  # float32: past 1e-4
    (lambda out: out.index_fill(-1, torch.tensor([0]), 1e4), "argmax is token 0"),
])
def test_a_candidate_whose_first_step_differs_from_eagers_is_dropped(gpu, monkeypatch, perturb, said):
    real = compiled.compile_step

    def wrong(name, mode, own_buffer):
        step = real(name, mode, own_buffer)
        return lambda *args: perturb(step(*args))

    monkeypatch.setattr(compiled, "compile_step", wrong)
    target, _ = fresh()
    picked = auto.record(target)
    assert picked["runner"] == "eager" and said in picked["dropped"]["compiled"]
    assert steps_of(target) is not None and auto.record(target) is picked  # recorded: not measured again


def test_the_tolerance_in_bf16_allows_rounding_not_a_wrong_step():
    eager = torch.tensor([[20.0, 3.0, -1.0]], dtype=torch.bfloat16)
    assert auto.first_step_differs(eager, eager + 0.125) is None  # one bf16 step at 20: rounding
    assert "differ" in auto.first_step_differs(eager, eager + torch.tensor([[0.0, 1.0, 0.0]]))
    assert auto.first_step_differs(eager.float(), eager.float() + 5e-5) is None
    assert auto.first_step_differs(eager.float(), eager.float() + 2e-3) is None  # 1e-4 + 1e-4 of 20
    assert "differ" in auto.first_step_differs(eager.float(), eager.float() + 3e-3)


def test_the_float32_tolerance_passes_fused_math_on_large_logits_and_rejects_a_planted_wrong_step():
    """Issue 52, item 5: over 151,936 float32 logits of magnitude ~30, inductor's fused math and the masked
    attention kernel differ from eager's by more than a flat 1e-4; the tolerance scales with the largest
    logit, and the top tokens' order is judged, so a correct step passes and a wrong one does not."""
    g = torch.Generator().manual_seed(0)
    eager = torch.randn(1, 151_936, generator=g) * 6
    eager[0, 17], eager[0, 4242] = 38.0, 36.5  # a clear argmax and runner-up
    fused = eager + torch.randn(eager.shape, generator=g) * 3e-4  # summed in another order
    assert float((fused - eager).abs().max()) > 1e-4  # the old flat tolerance rejected it
    assert auto.first_step_differs(eager, fused) is None
    swapped = eager.clone()
    swapped[0, 17], swapped[0, 4242] = 36.5, 38.0
    assert "argmax is token 4242, eager's 17" in auto.first_step_differs(eager, swapped)
    assert "differ from eager's" in auto.first_step_differs(eager, eager * 1.001)  # a scale off by 0.1 %
    third = eager.topk(3).indices[0, 2]
    lowered = eager.clone()
    lowered[0, 4242] = eager[0, third] - 1.0  # the runner-up pushed under the third
    assert "ranks eager's token" in auto.first_step_differs(eager, lowered)


def test_another_card_or_library_version_measures_again(gpu, monkeypatch):
    target, _ = fresh()
    first = auto.record(target)
    assert auto.record(target) is first
    gpu["name"] = "NVIDIA Other (compute capability 8.9, 24 GiB)"
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())  # a new process on the other card
    assert choice.recorded(target) is None
    again = auto.record(target)
    assert again is not first and again["runner"] == "compiled"
    real = choice.library_version
    monkeypatch.setattr(choice, "library_version", lambda name: "9.9.9" if name == "torch" else real(name))
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
    assert choice.recorded(target) is None
    assert len(json.loads(choice.choice_file().read_text())) == 2  # one a card so far


def test_the_warm_up_measures_then_compiles_the_races_shapes_and_the_race_compiles_nothing(gpu):
    target, draft = fresh()
    events = list(warm_up(target, draft, RUN, len(PROMPT)))
    chosen = [e for e in events if isinstance(e, Choosing) and e.done]
    assert [(e.model, e.choice["runner"]) for e in chosen] == [("target", "compiled"), ("draft", "compiled")]
    assert all(e.candidates == ("eager", "compiled") for e in events if isinstance(e, Choosing))
    compiles = [(e.model, e.rows) for e in events if isinstance(e, Compiling) and e.done]
    # the one-row steps and the target's 4-row verification were compiled while timing, on one cache; the
    # target's are recorded on the second cache a race steps in too (its plain and speculative runs at once)
    assert compiles == [("target", 1), ("target", 4), ("draft", 2), ("draft", 1), ("draft", 2)]
    assert set(chosen[0].choice["verify_ms"]) == {"eager", "compiled"} and "verify_ms" not in chosen[1].choice
    keys = {m: set(steps_of(m).seconds) for m in (target, draft)}
    frames = dict(torch._dynamo.utils.counters["frames"])
    assert list(warm_up(target, draft, RUN, len(PROMPT))) == []  # measured and compiled once
    config = factory.spec_config(RUN)
    plain = output_tokens(list(generate(target, PROMPT, config)))
    speculative = output_tokens(list(generate(target, PROMPT, config,
                                              factory.make_drafter(RUN, factory.Models(target, draft)))))
    eager = output_tokens(list(generate(target, PROMPT, factory.spec_config(replace(RUN, runner="eager")))))
    assert plain == speculative == eager  # greedy identity on the runner auto picked, float32
    assert {m: set(steps_of(m).seconds) for m in (target, draft)} == keys
    assert dict(torch._dynamo.utils.counters["frames"]) == frames  # no compile, not even a recompile


def test_when_eager_wins_the_compiled_steps_are_let_go(gpu, monkeypatch):
    monkeypatch.setitem(STEP_MS, "compiled", 25.0)
    target, draft = fresh()
    events = list(warm_up(target, draft, RUN, len(PROMPT)))
    assert [e.choice["runner"] for e in events if isinstance(e, Choosing) and e.done] == ["eager", "eager"]
    assert not any(isinstance(e, Compiling) for e in events)
    assert not steps_of(target) and CachedModel(target).runner.name == "eager"


@pytest.mark.parametrize("failing", [4, 8])
def test_a_shape_failing_after_compiled_was_chosen_runs_uncompiled_and_turns_the_choice_to_eager(
        gpu, monkeypatch, failing):
    """Issue 52, item 3: compiled recorded from the plain step, a later shape (a 4-row verification, the
    8-row step of a longer γ) fails to compile or capture, as a card running out while it records would.
    The run goes on uncompiled at that shape with the same tokens, says why (Steps.failed), and the record
    turns to eager with the reason, so the next load does not compile again."""
    real = compiled.compile_step

    def failing_at(name, mode, own_buffer):
        if name.startswith(f"step_{failing}x"):
            def step(*args):
                raise torch.cuda.OutOfMemoryError("planted: out of memory while recording")
            return step
        return real(name, mode, own_buffer)

    target, draft = fresh()
    picked = auto.record(target)  # the plain step (and no verification): compiled kept
    assert picked["runner"] == "compiled"
    monkeypatch.setattr(compiled, "compile_step", failing_at)
    run = replace(RUN, gamma=failing - 1, runner="compiled", max_new_tokens=40)
    expected = output_tokens(generate(target, PROMPT, factory.spec_config(replace(run, runner="eager"))))
    out = output_tokens(generate(target, PROMPT, factory.spec_config(run),
                                 factory.make_drafter(run, factory.Models(target, draft))))
    assert out == expected
    assert any(f"the {failing}-row step" in why and "OutOfMemoryError" in why
               for why in steps_of(target).failed.values())
    now = choice.recorded(target, role=choice.DRAFT)  # recorded from its plain step alone: as a draft
    assert now["runner"] == "eager" and "OutOfMemoryError" in now["dropped"]["compiled"]
    assert resolve("auto", "cuda", model=target) == "eager"
    assert json.loads(choice.choice_file().read_text())[choice.entry_key(
        target, None, torch.get_num_threads(), role=choice.DRAFT)]["runner"] == "eager"  # on disk: the next start reads it


def test_a_target_whose_verification_fails_to_compile_is_recorded_eager(gpu, monkeypatch):
    """The verification auto times beside a target's plain step is a shape of its own: one that fails there
    drops compiled with why, as a failing first step does, instead of raising out of the load."""
    real = compiled.compile_step

    def failing_at_four(name, mode, own_buffer):
        if name.startswith(f"step_{auto.VERIFY_ROWS}x"):
            def step(*args):
                raise RuntimeError("planted: capture failed")
            return step
        return real(name, mode, own_buffer)

    monkeypatch.setattr(compiled, "compile_step", failing_at_four)
    target, _ = fresh()
    picked = auto.record(target, verifies=True)
    assert picked["runner"] == "eager" and set(picked["step_ms"]) == {"eager"}
    assert "the 4-row step" in picked["dropped"]["compiled"] and "planted: capture failed" in picked["dropped"]["compiled"]


def test_the_benchmark_chooses_as_the_page_does(gpu, tmp_path, capsys):
    """Issue 52, item 4: `python -m playground.bench --runner auto` on a fresh card measures auto's choice
    through the same function as the page's warm-up (warmup.choose), so it benchmarks what the app runs;
    before, only the app recorded one and the benchmark ran eager on a fresh card."""
    from playground.measure.bench import cli

    assert cli.main(["--pair", "tiny", "--runner", "auto", "--categories", "coding", "--limit", "1",
                     "--max-new-tokens", "6", "--repeats", "1", "--warmup", "1", "--gamma", "3",
                     "--json", str(tmp_path / "r.json")]) == 0
    recorded = json.loads(choice.choice_file().read_text())
    assert [k for k in recorded if k.startswith(gpu["name"])], recorded  # the target's choice, measured by the bench
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runs"][0]["runner"] == "compiled"  # the faster (planted) one, as the page would run it


def test_the_race_shows_the_compile_seconds_of_what_auto_compiled(gpu, race_tab):
    """Issue 52, item 8: the race resolved the runner without the model, read auto as eager and never said
    "+N s compiling"; under auto on a card where compiled was kept, the stats say the seconds."""
    import html

    from playground.app.race import tab as tab_race

    ctx, view = race_tab
    values = {**{n: getattr(RUN, n) for n in RunConfig.names()}, "max_new_tokens": 6}
    *_, last = tab_race.handle(ctx, view, tab_race.RaceForm("def add(a, b):", "", values))
    stats = html.unescape(last[view.stats])
    assert "Done" in last[view.status] and "s compiling this pair's step shapes" in stats, stats


def test_no_graph_is_recorded_inside_a_race_after_its_warm_up_whatever_ran_before(gpu, monkeypatch):
    """Issue 52, item 1: a race steps the target in two caches at once, and cudagraph trees record a graph
    again for a static input at a new address; a shorter race lets the longer caches go, so the next longer
    race meets new ones. The warm-up records each shape on each cache the race will take, so nothing is
    recorded inside a race, long, short, then long again: no compiled shape meets a cache in the race that
    it had not met in the warm-up (watched here), and the page's own count (Steps.while_running) agrees."""
    from playground.measure.bench.race import interleave

    seen: set = set()  # (compiled shape, model, cache address): what a CUDA graph is recorded for
    real = compiled.compile_step

    def watched(name, mode, own_buffer):
        step = real(name, mode, own_buffer)

        def run(model, head, cache, *rest):
            seen.add((name, id(model), cache.layers[0].keys.data_ptr()))
            return step(model, head, cache, *rest)
        return run

    monkeypatch.setattr(compiled, "compile_step", watched)
    target, draft = fresh()
    long_prompt = [(7 * i + 3) % 250 for i in range(240)]  # with 12 new tokens: a 512-entry cache
    for prompt in (long_prompt, PROMPT, long_prompt):
        list(warm_up(target, draft, RUN, len(prompt)))
        warmed, counted = set(seen), {m: steps_of(m).while_running for m in (target, draft)}
        config = factory.spec_config(RUN)
        streams = {"plain": generate(target, prompt, config),
                   "speculative": generate(target, prompt, config, factory.make_drafter(RUN, factory.Models(target, draft)))}
        ran = list(interleave(streams))  # both runs at once, as the race steps them
        assert ran and seen == warmed, (len(prompt), seen - warmed)  # no shape met a cache the warm-up had not
        assert {m: steps_of(m).while_running for m in (target, draft)} == counted  # and the page's count agrees
