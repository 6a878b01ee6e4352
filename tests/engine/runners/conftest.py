"""A card stood in for on the CPU, for the tests of auto on a GPU (test_auto_gpu.py, test_auto_context.py)."""

from __future__ import annotations

import weakref

import pytest

from playground.engine.runners import auto, choice, timing
from playground.engine.runners.compiled import CompiledRunner
from playground.engine.runners.eager import EagerRunner

CARD = "NVIDIA Stand-in (compute capability 9.0, 140 GiB)"


@pytest.fixture
def on_a_card(tmp_path, monkeypatch):
    """on_a_card(cost) -> the card: every model counts as on a card named CARD (the returned dict's "name",
    which a test may change); choices in a file of the test's own; each eager or compiled forward advances
    the fake clock auto times with by cost(runner) milliseconds, the runner before it steps."""
    def plant(cost) -> dict:
        monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
        monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
        monkeypatch.setattr(choice, "device_kind", lambda model: "cuda")
        monkeypatch.setattr(auto, "device_kind", lambda model: "cuda")
        card = {"name": CARD}
        monkeypatch.setattr(choice, "card_name", lambda device: card["name"])
        now = [0.0]
        monkeypatch.setattr(timing, "clock", lambda device: now[0])
        for runner in (EagerRunner, CompiledRunner):
            monkeypatch.setattr(runner, "forward", advancing(runner.forward, cost, now))
        return card
    return plant


def advancing(forward, cost, now: list[float]):
    def timed(self, *args, **kwargs):
        now[0] += cost(self) / 1000
        return forward(self, *args, **kwargs)
    return timed
