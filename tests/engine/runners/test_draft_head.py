"""A draft's head chosen on this machine (engine/runners/auto.py record_head, warmup.choose_head and
chosen_head): where the pair's draft vocabulary runs on a runner whose cut head is not cheaper by
construction, the draft's plain step is timed cut and whole once, the faster kept (a tie to the whole
head), recorded beside auto's runner choices, and the drafter drafts with it; a draft vocabulary the
user set is not timed. The timing is replaced by fixed numbers here: the tiny pair runs eager, whose
cut is free, so the tests name eager a runner whose cut is not (CUT_NOT_FREE), and nothing measured
decides an assertion."""

from __future__ import annotations

import json
import weakref
from dataclasses import replace

import pytest

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.runners import auto, choice
from playground.engine.runners.warmup import DRAFT, HEAD, Choosing, build_models, chosen_head

RUN = RunConfig(pair="tiny", runner="eager", draft_vocab=64)  # the pair's suggestion, as the caller says


@pytest.fixture
def timed(pair, tmp_path, monkeypatch):
    """The choices kept in a file of the test's own under a key of the test's own (key_of is another
    change's), eager's cut counted as not free, and the timing replaced: timed.ms sets what each head's
    step takes, timed.calls holds what each call timed."""
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    monkeypatch.setattr(choice, "key_of", lambda model, rows, threads:  # stable across loads, as the real one
                        f"{model.config.num_hidden_layers} layers {rows} {threads}")
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(auto, "CUT_NOT_FREE", ("eager",))

    class Timed:
        ms = {"cut": 13.9, "full": 9.8}
        calls: list = []

        @classmethod
        def steps(cls, model, candidates, verify_rows=0, context=128):
            cls.calls.append(candidates)
            return auto.Timed({name: cls.ms[name] for name in candidates})

    Timed.calls = []
    monkeypatch.setattr(auto, "time_steps", Timed.steps)
    return Timed


def heads(events) -> list:
    return [e for e in events if isinstance(e, Choosing) and e.what == HEAD]


def drafted_rows(pair, run: RunConfig):
    """The head rows of the drafter a run of these settings builds (None: the whole head)."""
    target, draft, _ = pair
    return factory.make_drafter(run, factory.Models(target, draft)).lm.head_rows


@pytest.mark.parametrize("ms, kept", [({"cut": 13.9, "full": 9.8}, "full"),
                                      ({"cut": 5.0, "full": 9.8}, "cut"),
                                      ({"cut": 9.8, "full": 9.8}, "full")])  # a tie: the head with every token
def test_the_faster_head_is_recorded_and_drafted_with(pair, timed, ms, kept):
    target, draft, _ = pair
    timed.ms = ms
    events = heads(build_models(target, draft, RUN, head=True))
    assert [e.done for e in events] == [False, True] and events[0].model == DRAFT
    made = events[-1].choice
    assert timed.calls == [{"cut": ("eager", 64), "full": ("eager", None)}]  # each head on its runner
    assert made["head"] == kept and made["step_ms"] == ms
    assert made["rows"] == {"cut": 64, "full": draft.config.vocab_size}
    run = chosen_head(draft, RUN)
    assert run == (replace(RUN, draft_vocab=0) if kept == "full" else RUN)
    assert drafted_rows(pair, run) == (None if kept == "full" else 64)
    recorded = json.loads(choice.choice_file().read_text())  # beside auto's runner choices, in their file
    assert list(recorded.values()) == [made] and list(recorded)[0].endswith(" | draft head on eager")


def test_a_second_run_reads_the_choice_and_times_nothing(pair, timed, monkeypatch):
    target, draft, _ = pair
    first = heads(build_models(target, draft, RUN, head=True))[-1].choice
    monkeypatch.setattr(auto, "time_steps", lambda *a: pytest.fail("timed again"))
    assert not heads(build_models(target, draft, RUN, head=True))  # the same process: from memory
    choice.SEEN.clear()  # a new process: from the file
    assert not heads(build_models(target, draft, RUN, head=True))
    assert first["head"] == "full" and chosen_head(draft, RUN).draft_vocab == 0


def test_nothing_is_timed_for_a_draft_vocabulary_the_user_set_or_a_cut_that_is_free(pair, timed, monkeypatch):
    target, draft, _ = pair
    assert not heads(build_models(target, draft, RUN))  # the user's: drafted as set
    assert drafted_rows(pair, RUN) == 64
    for run in (replace(RUN, draft_vocab=0), replace(RUN, drafter="prompt_lookup")):  # no head to choose
        assert not heads(build_models(target, draft, run, head=True)) and chosen_head(draft, run) == run
    monkeypatch.setattr(auto, "CUT_NOT_FREE", ("onnxruntime", "llamacpp"))  # as shipped: eager's cut is free
    assert not heads(build_models(target, draft, RUN, head=True)) and chosen_head(draft, RUN) == RUN
    assert timed.calls == []


def test_auto_times_runners_through_the_same_function(pair, timed):
    """auto's runner choice and the head choice share time_steps: the runners are its candidates."""
    _, draft, _ = pair
    timed.ms = {"eager": 20.0, "onnxruntime": 10.0}
    made = auto.record(draft, 64)
    assert timed.calls == [{"eager": ("eager", 64), "onnxruntime": ("onnxruntime", 64)}]
    assert made["runner"] == "onnxruntime" and choice.recorded(draft, 64, role=choice.DRAFT) == made
    assert choice.recorded(draft, 64, auto.head_kind("eager")) is None  # another kind: its own entry


def test_the_timing_function_times_each_candidate(pair, one_thread):
    """The real time_steps on the tiny draft, each head on eager: a median per candidate."""
    _, draft, _ = pair
    timed = auto.time_steps(draft, {"cut": ("eager", 64), "full": ("eager", None)}, verify_rows=4)
    assert set(timed.step_ms) == {"cut", "full"} and min(timed.step_ms.values()) > 0 and timed.dropped == {}
    assert set(timed.verify_ms) == {"cut", "full"} and min(timed.verify_ms.values()) > 0
