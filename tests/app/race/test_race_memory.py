"""The race's memory: the resident growth measured (psutil) beside the weights counted, on the tiny pair;
the app's first load takes the baseline."""

from __future__ import annotations

import re
import weakref

import numpy as np
import pytest

from playground.app.race.frames import race_frames
from playground.app.race.summary import stats_html
from playground.app.shared.context import build_context
from playground.config import RunConfig
from playground.engine.memory import model_bytes
from playground.measure.bench import resident

MB = 2**20
BUFFER = 256 * MB


@pytest.fixture
def unmarked(monkeypatch):
    monkeypatch.setattr(resident, "BASELINE", None)
    monkeypatch.setattr(resident, "GROWN", weakref.WeakKeyDictionary())


def loaded(ctx, settings):
    """ctx.load driven to its end, as a handler does with `yield from`."""
    load = ctx.load(settings)
    try:
        while True:
            next(load)
    except StopIteration as done:
        return done.value


def test_the_race_reports_the_growth_it_measured_beside_the_weights_it_counted(unmarked):
    ctx, settings = build_context(), RunConfig(pair="tiny", max_new_tokens=12, temperature=0.0)
    pair = loaded(ctx, settings)
    assert resident.BASELINE is not None  # the app's load took it, before loading
    resident.mark(fresh=True)  # from here: the buffer and the race
    buffer = np.ones(BUFFER // 8)
    *_, last = race_frames(pair, "def add(a, b):", "", settings, every=0.0)
    assert last.done and last.resident_mb >= 0.8 * BUFFER / MB, last.resident_mb
    assert last.weights_mb[0] == pytest.approx(model_bytes(pair.target.model) / MB)
    shown = stats_html(last)
    assert re.search(r"weights MB \(counted\)</td><td>[\d,.]+</td><td>[\d,.]+</td>", shown)
    measured = re.search(r'resident MB \(measured\)</td><td colspan="2"[^>]*>([\d,.]+)', shown).group(1)
    assert float(measured.replace(",", "")) == pytest.approx(last.resident_mb, abs=0.1)
    del buffer


def test_without_a_baseline_the_race_says_not_measured(unmarked):
    ctx, settings = build_context(), RunConfig(pair="tiny", max_new_tokens=4, temperature=0.0)
    pair = ctx.cache.get("tiny")  # loaded around the app's load: nothing marked
    *_, last = race_frames(pair, "x =", "", settings, every=0.0)
    assert last.resident_mb is None
    assert re.search(r'resident MB \(measured\)</td><td colspan="2"[^>]*>–', stats_html(last))
