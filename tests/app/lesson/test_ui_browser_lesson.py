"""The p/q explorer and the guided lesson in headless Chromium (Debian's), as a learner sees them.

Runs on the tiny random pair by default. To save the README screenshots:
    UI_SCREENSHOT_DIR=assets python -m pytest -m browser tests/app/lesson/test_ui_browser_lesson.py
(UI_BROWSER_PAIR=default runs the lesson on the real pair; its timing steps then take minutes).
"""

from __future__ import annotations

from browser import PAIR, needs_chromium, shoot
from playwright.sync_api import expect

from playground.app.lesson.steps import LESS, SAME, STEPS

STEP_MS = 120_000 if PAIR == "tiny" else 1_800_000

pytestmark = needs_chromium


def test_explorer_preset_numbers_and_sampling(page, tmp_path):
    page.get_by_role("tab", name="p/q explorer").click()
    page.get_by_text("draft misses a token the target likes", exact=True).click()
    accept = page.locator("#ex-accept-note")
    expect(accept).to_contain_text("never proposes owl", timeout=30_000)
    expect(page.locator("#ex-overlap-note")).to_contain_text("α = 0.70")
    expect(page.locator("#ex-q-3 input[type=number]")).to_have_value("0")
    page.locator("#ex-sample").click()
    expect(page.locator("#ex-status")).to_contain_text("Done: 10,000 draws", timeout=120_000)
    expect(page.locator("#ex-sample-note")).to_contain_text("No detectable difference from p after 10,000 draws")
    assert page.locator("#ex-sample-plot .js-plotly-plot .barlayer .trace").count() == 1
    page.locator("#ex-overlap-plot").scroll_into_view_if_needed()
    shoot(page, tmp_path, "explorer.png")


def test_walk_the_lesson_entering_predictions(page, tmp_path):
    page.get_by_role("tab", name="Lesson").click()
    pair = page.locator("#lesson-pair input")
    if PAIR not in pair.input_value():
        pair.click()
        page.get_by_role("option", name=PAIR).first.click()
    predictions = ["2", "0.5", SAME, "1.5", "4", LESS]
    for i, (step, prediction) in enumerate(zip(STEPS, predictions, strict=True)):
        expect(page.locator("#lesson-text")).to_contain_text(f"Step {i + 1} of {len(STEPS)}: {step.title}")
        if prediction in (SAME, LESS):
            page.locator("#lesson-choice").get_by_text(prediction).click()
        else:
            page.locator("#lesson-prediction input").fill(prediction)
        expect(page.locator("#lesson-status")).to_contain_text("Predict first")
        page.locator("#lesson-run").click()
        expect(page.locator("#lesson-status")).to_contain_text("Measured.", timeout=STEP_MS)
        result = page.locator("#lesson-result")
        expect(result).to_contain_text("your " + ("γ" if i == 4 else "prediction"))
        expect(result).to_contain_text("measured" if i != 2 else "the lab found")
        assert "⚠" not in page.locator("#lesson-status").inner_text()
        assert page.locator("#lesson-plot .js-plotly-plot").count() == 1
        expect(page.locator("#lesson-progress")).to_contain_text(f"✓ {i + 1}. {step.title}")
        if i == 3:  # the prediction beside the measured speedup: the README's picture
            expect(result).to_contain_text("measured speedup")
            page.locator("#lesson-text").scroll_into_view_if_needed()
            shoot(page, tmp_path, "lesson.png")
        page.locator("#lesson-next").click()
    expect(page.locator("#lesson-progress")).to_contain_text("Lesson complete")
    # Back shows a finished step's result again, kept in this browser session
    for _ in range(len(STEPS) - 4):  # back from the last step to step 4
        page.locator("#lesson-back").click()
    expect(page.locator("#lesson-text")).to_contain_text(f"Step 4 of {len(STEPS)}")
    expect(page.locator("#lesson-result")).to_contain_text("measured speedup")


def test_the_fast_lab_draws_20000_and_plots_the_distance_against_n(page):
    page.get_by_role("tab", name="Losslessness lab").click()
    page.locator("#lab-fast").click()
    expect(page.locator("#lab-status")).to_contain_text("Done: 20000 draws each way", timeout=STEP_MS)
    expect(page.locator("#lab-verdict")).to_contain_text("No detectable difference at 20000 draws")
    assert page.locator("#lab-plot .js-plotly-plot .barlayer .trace").count() == 2
    assert page.locator("#lab-convergence .js-plotly-plot .scatterlayer .trace").count() == 3
