"""The race's draft head (flow.load_pair's head, race.tab.pairs_head): a draft vocabulary the user left
at the pair's value is the machine's to choose, so on a runner whose cut head is not cheaper the race
drafts with the head measured faster and its status box says so (the benchmark's progress in its own
words); one the user set drafts as set.
Real races of the tiny pair as if models.yaml suggested a draft vocabulary of 64, on eager named a
runner whose cut is not free, with fixed step times: nothing measured decides."""

from __future__ import annotations

import html
import weakref
from dataclasses import replace

import pytest

from playground.config import RunConfig
from playground.engine.runners import auto, choice
from playground.engine.runners.warmup import DRAFT, HEAD, RUNNER, Choosing

ISSUE = {"head": "full", "step_ms": {"cut": 13.9, "full": 9.8}, "rows": {"cut": 65536, "full": 151936},
         "runners": {"cut": "onnxruntime", "full": "onnxruntime"}}  # issue 38's EPYC, as a choice records it


def values(**changes) -> dict:
    return {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
            "pair": "tiny", "max_new_tokens": 6, "temperature": 0.0, "runner": "eager", "draft_vocab": 64,
            **changes}


@pytest.fixture
def page(race_tab, tmp_path, monkeypatch):
    """The race tab with the tiny pair suggesting draft_vocab 64, choices in a file of the test's own,
    and the settings each race's frames were made with (`page.ran`)."""
    from playground.app.race import tab as tab_race

    ctx, view = race_tab
    monkeypatch.setitem(ctx.registry.pairs, "tiny", replace(ctx.registry.pair("tiny"), draft_vocab=64))
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    monkeypatch.setattr(choice, "key_of", lambda model, rows, threads:  # stable across loads, as the real one
                        f"{model.config.num_hidden_layers} layers {rows} {threads}")
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(auto, "CUT_NOT_FREE", ("eager",))
    monkeypatch.setattr(auto, "time_steps", lambda model, candidates, verify_rows=0: auto.Timed({"cut": 13.9, "full": 9.8}))
    ran, real = [], tab_race.race_frames

    def watched(pair, prompt, system, settings, **kw):
        ran.append(settings)
        return real(pair, prompt, system, settings, **kw)

    monkeypatch.setattr(tab_race, "race_frames", watched)

    def race(vocab_set: bool, **changes) -> list[str]:
        form = tab_race.RaceForm("def add(a, b):", "", values(**changes), True, vocab_set)
        frames = list(tab_race.handle(ctx, view, form))
        return [html.unescape(f[view.status]) for f in frames if view.status in f]

    race.ran = ran
    return race


def test_a_race_left_at_the_pairs_vocabulary_drafts_with_the_faster_head(page, monkeypatch):
    said = page(vocab_set=False)
    assert any("Draft head on eager: full 259 rows, 9.8 ms vs cut 64 rows, 13.9 ms: the full head drafts" in s
               for s in said), said
    assert page.ran[-1].draft_vocab == 0 and "Done" in said[-1]
    monkeypatch.setattr(auto, "time_steps", lambda *a: pytest.fail("timed again"))
    again = page(vocab_set=False)  # measured once: the next race reads it
    assert not any("Draft head" in s for s in again) and page.ran[-1].draft_vocab == 0


def test_a_vocabulary_the_user_set_drafts_as_set(page, monkeypatch):
    monkeypatch.setattr(auto, "time_steps", lambda *a: pytest.fail("timed"))
    page(vocab_set=True)  # moved on the page, or an API call
    page(vocab_set=False, draft_vocab=32)  # not the pair's value: a hand-over's
    assert [run.draft_vocab for run in page.ran] == [64, 32]


def test_the_head_choice_is_rendered_by_the_bench_and_the_page():
    from playground.app.shared.flow import compile_message
    from playground.measure.bench.sweep import build_text

    line = "draft head on onnxruntime: full 151,936 rows, 9.8 ms vs cut 65,536 rows, 13.9 ms"
    done, before = Choosing(DRAFT, ISSUE, HEAD), Choosing(DRAFT, what=HEAD)
    assert build_text(done, "γ = 3") == f"{line}: the full head drafts (kept for this machine), γ = 3"
    assert compile_message(done) == "D" + line[1:] + ": the full head drafts (kept for this machine)."
    assert "cut and whole" in build_text(before, "γ = 3") and "cut to the pair's" in compile_message(before)
    moved = {**ISSUE, "head": "cut", "runners": {"cut": "onnxruntime", "full": "eager"}}
    assert build_text(Choosing(DRAFT, moved, HEAD), "x").startswith(
        "draft head: cut 65,536 rows on onnxruntime, 13.9 ms vs full 151,936 rows on eager, 9.8 ms")
    runner = Choosing(DRAFT, {"runner": "eager", "step_ms": {"eager": 9.0, "onnxruntime": 12.0}})
    assert runner.what == RUNNER and "auto: the draft on eager" in build_text(runner, "x")


def test_another_draft_picked_on_the_page_drafts_over_its_own_head(page):
    """The pair's cut head is its own draft's (issue 55: the default pair's 65,536 rows followed the user to
    SmolLM2 and Gemma): while the page shows the pair's suggestion, another draft drafts whole."""
    said = page(vocab_set=False, draft="tiny-target")
    assert page.ran[-1].draft == "tiny-target" and page.ran[-1].draft_vocab == 0 and "Done" in said[-1]
    page(vocab_set=True, draft="tiny-target")  # one the user set drafts as set
    assert page.ran[-1].draft_vocab == 64
