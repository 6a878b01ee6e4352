"""The Lesson's sixth step: c and v(5) of the tiny pair through the run's runner, the learner's
verdict on v(5) graded against the measurement. The handler is called directly; no timing is
asserted (the verdict is read off the same measured curve the step shows)."""

from __future__ import annotations

import html

import pytest

from playground.app.lesson import steps as lesson
from playground.app.lesson import tab as tab_lesson
from playground.app.lesson.steps import LESS, MORE, STEPS, Progress

COSTS = len(STEPS) - 1  # the step on c and v


def test_the_verdict_is_read_off_v_at_five_rows():
    assert lesson.verify_verdict([1.0, 1.1, 1.2, 1.4, 2.3]) == MORE
    assert lesson.verify_verdict([1.0, 1.0, 1.0, 1.01, 1.02, 3.0]) == LESS
    assert lesson.verify_verdict([1.0, 1.1, 1.2, 1.3, 1.5]) == LESS  # 1.5 itself is not more than 1.5
    assert lesson.check_prediction(STEPS[COSTS], MORE) == MORE
    with pytest.raises(ValueError, match="prediction must be one of"):
        lesson.check_prediction(STEPS[COSTS], "2 steps")


def test_the_step_offers_its_own_two_verdicts(tab_view):
    _, page = tab_view(tab_lesson)
    shown = tab_lesson.show_step(page, Progress(step=COSTS))
    assert shown[page.choice]["visible"] is True and shown[page.choice]["choices"] == [MORE, LESS]
    assert shown[page.prediction]["visible"] is False and shown[page.gamma]["visible"] is False
    assert "c and v" in shown[page.text]


@pytest.mark.parametrize("verdict", [MORE, LESS])
def test_measuring_grades_the_verdict_against_the_measured_curve(tab_view, verdict):
    ctx, page = tab_view(tab_lesson)
    form = tab_lesson.LessonForm(Progress(step=COSTS), "def add(a, b):", "tiny", None, verdict, 4)
    frames = list(tab_lesson.handle(ctx, page, form))
    last = frames[-1]
    assert "Measured." in last[page.status]
    spec = ctx.registry.pair("tiny")
    cost = ctx.costs.known(spec.target, spec.draft)["eager"]  # auto is eager on a CPU: the run's runner
    found = lesson.verify_verdict(cost.target.v)
    result = last[page.state].results[COSTS]
    assert result["measured"] == found and result["grade"] == ("exact" if verdict == found else "off")
    text = html.unescape(last[page.result])
    assert f"{cost.target.v[4]:.2f} plain steps" in text and f"{cost.c:.2f}" in text and "eager" in text
    assert ("bound" in text) and list(last[page.plot].data[0].y) == pytest.approx(list(cost.target.v))
