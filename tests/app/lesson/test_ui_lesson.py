"""The guided lesson: its pure bookkeeping, and its handler walked through all six steps on the
tiny random pair (no download)."""

from __future__ import annotations

import html

import gradio as gr
import pytest

from playground.app.lesson import steps as lesson
from playground.app.lesson.steps import GAMMAS, LESS, SAME, STEPS, Progress
from playground.app.lesson import tab as tab_lesson
from playground.app.lesson.tab import progress_html, show_step

PROMPT = "def add(a, b):"


def test_grading_and_checking_predictions():
    assert lesson.grade(2.0, 2.2) == "close" and lesson.grade(1.0, 2.2) == "off"
    assert lesson.grade_gamma(4, 4) == "exact" and lesson.grade_gamma(2, 4) == "close"
    assert lesson.grade_gamma(1, 8) == "off"
    assert lesson.check_prediction(STEPS[0], 3) == 3.0
    with pytest.raises(ValueError, match=r"prediction must be in \[1, 5\], got 9"):
        lesson.check_prediction(STEPS[0], 9)
    with pytest.raises(ValueError, match="prediction must be a number"):
        lesson.check_prediction(STEPS[1], None)
    with pytest.raises(ValueError, match="prediction must be one of 1, 2, 4, 8, got 3"):
        lesson.check_prediction(STEPS[4], 3)
    with pytest.raises(ValueError, match="prediction must be one of"):
        lesson.check_prediction(STEPS[2], "maybe")


def test_navigation_stays_in_range_and_keeps_results(tab_view):
    _, page = tab_view(tab_lesson)
    start = Progress()
    assert start.moved(-1).step == 0 and start.moved(99).step == len(STEPS) - 1
    done = start.with_result(0, {"prediction": 2.0, "html": "<p>kept</p>", "figure": None})
    view = show_step(page, done.moved(1).moved(-1))
    assert view[page.state].step == 0 and view[page.result] == "<p>kept</p>" and view[page.prediction]["value"] == 2.0
    assert "✓ 1." in progress_html(done)
    third = show_step(page, start.moved(2))
    assert third[page.prediction]["visible"] is False and third[page.choice]["visible"] is True  # a verdict
    assert show_step(page, start.moved(3))[page.gamma]["visible"] is True  # γ is asked in step 4 only


def run_step(ctx, page, progress, prediction=None, choice=None, gamma=4):
    form = tab_lesson.LessonForm(progress, PROMPT, "tiny", prediction, choice, gamma)
    frames = list(tab_lesson.handle(ctx, page, form))
    last = frames[-1]
    assert "Measured." in last[page.status], last[page.status]
    return last[page.result], last[page.plot], last[page.state]


def test_walk_the_whole_lesson_on_the_tiny_pair(tab_view):
    ctx, page = tab_view(tab_lesson)
    progress = Progress()
    predictions = [dict(prediction=2.5), dict(prediction=0.5), dict(choice=SAME), dict(prediction=1.5, gamma=3),
                   dict(prediction=4), dict(choice=LESS)]
    for i, prediction in enumerate(predictions):
        assert progress.step == i
        result, figure, progress = run_step(ctx, page, progress, **prediction)
        text = html.unescape(result)
        assert "your prediction" in text or "your γ" in text
        assert ("measured" in text or "the lab found" in text or "fastest measured γ" in text)
        assert any(g in result for g in ('class="close"', 'class="exact"', 'class="off"'))
        assert figure.data
        progress = progress.moved(1)
    assert progress.finished and "Lesson complete" in progress_html(progress)
    assert progress.results[2]["measured"] == SAME  # the engine is lossless on the tiny pair too
    assert progress.results[4]["measured"] in GAMMAS
    assert len(ctx.measurements.get(None)) == 1 + len(GAMMAS)  # timings reach the Theory tab


def test_a_bad_prediction_is_a_message_naming_the_field(tab_view):
    ctx, page = tab_view(tab_lesson)
    runs = tab_lesson.handle(ctx, page, tab_lesson.LessonForm(Progress(), PROMPT, "tiny", 42, None, 4))
    with pytest.raises(gr.Error) as raised:
        list(runs)
    assert "prediction must be in [1, 5], got 42" in str(raised.value)


def test_step_three_compares_greedy_texts_and_shows_the_evidence_where_they_part(tab_view, flipped_verification):
    """Greedy identity beside the lab: identical on the tiny pair (float32); with its verification
    forwards rounding the other way, the first differing token, the target's top two there with their
    margin, and the verdict (float32: a bug, whatever the margin)."""
    ctx, page = tab_view(tab_lesson)
    third = Progress().moved(2)
    result, _, progress = run_step(ctx, page, third, choice=SAME)
    assert "identical, 32 tokens" in html.unescape(result) and 'id="divergence"' not in result
    assert progress.results[2]["greedy"] is None
    flipped_verification(ctx.cache.get("tiny").target.model)
    result, _, progress = run_step(ctx, page, third, choice=SAME)
    parted = progress.results[2]["greedy"]
    assert parted is not None and f"they differ from token {parted.position + 1}" in html.unescape(result)
    assert 'id="divergence"' in result and f"{parted.plain.margin:.3f}" in result and "A bug" in result
