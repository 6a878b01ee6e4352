"""The benchmark's draft head (measure/bench/cli.choose_head): without --draft-vocab the pair's draft
vocabulary is the machine's to choose, so on a runner whose cut head is not cheaper the draft runs the
head measured faster, said and kept in the report; a second benchmark reads the choice and times
nothing; --draft-vocab runs as given. The tiny pair as if models.yaml suggested a draft vocabulary of
64, on eager named a runner whose cut is not free, with fixed step times: nothing measured decides."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest

from playground.engine.runners import auto, choice
from playground.measure.bench import cli
from playground.models.registry import load_registry

RUN = ["--pair", "tiny", "--runner", "eager", "--categories", "coding", "--limit", "1",
       "--max-new-tokens", "6", "--repeats", "1", "--warmup", "0", "--json"]


@pytest.fixture
def suggested(tmp_path, monkeypatch):
    """models.yaml with the tiny pair suggesting draft_vocab 64; choices in a file of the test's own."""
    pair = "    random_weights: true\n    gamma: 4\n"
    text = Path(load_registry().path).read_text().replace(pair, pair + "    draft_vocab: 64\n")
    assert "draft_vocab: 64" in text
    (tmp_path / "models.yaml").write_text(text)
    monkeypatch.setenv("PLAYGROUND_CONFIG", str(tmp_path / "models.yaml"))
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    monkeypatch.setattr(choice, "key_of", lambda model, rows, threads:  # stable across loads, as the real one
                        f"{model.config.num_hidden_layers} layers {rows} {threads}")
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
    monkeypatch.setattr(auto, "CUT_NOT_FREE", ("eager",))
    calls = []
    monkeypatch.setattr(auto, "time_steps", lambda model, candidates, verify_rows=0: calls.append(candidates) or
                        auto.Timed({"cut": 13.9, "full": 9.8}))
    return calls


def bench(tmp_path, name: str, *flags: str) -> dict:
    assert cli.main([*RUN, str(tmp_path / name), *flags]) == 0
    return json.loads((tmp_path / name).read_text())


def test_the_benchmark_drafts_with_the_faster_head_unless_the_vocabulary_is_given(tmp_path, suggested, capsys,
                                                                                  monkeypatch):
    report = bench(tmp_path, "chosen.json")
    assert suggested == [{"cut": ("eager", 64), "full": ("eager", None)}]
    head = report["config"]["draft_head"]
    assert head["head"] == "full" and head["step_ms"] == {"cut": 13.9, "full": 9.8}
    assert report["runs"][0]["settings"]["draft_vocab"] == 0  # what ran: the whole head
    assert "draft head on eager: full " in capsys.readouterr().err
    monkeypatch.setattr(auto, "time_steps", lambda *a: pytest.fail("timed again"))
    choice.SEEN.clear()  # as a new process: the choice read from the file
    again = bench(tmp_path, "again.json")
    assert again["runs"][0]["settings"]["draft_vocab"] == 0 and again["config"]["draft_head"] == head
    given = bench(tmp_path, "given.json", "--draft-vocab", "64")
    assert given["runs"][0]["settings"]["draft_vocab"] == 64 and "draft_head" not in given["config"]
    swept = bench(tmp_path, "swept.json", "--sweep", "draft_vocab=64,0")
    assert [r["settings"]["draft_vocab"] for r in swept["runs"]] == [64, 0]
