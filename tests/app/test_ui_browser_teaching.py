"""The teaching and tuning tabs in headless Chromium (Debian's), as a person sees them.

Runs on the tiny random pair by default. For the README screenshots of the real default pair:
    UI_BROWSER_PAIR=default UI_SCREENSHOT_DIR=assets \
        python -m pytest -m browser tests/app/test_ui_browser_teaching.py
(UI_SCREENSHOT_DIR alone saves the tiny pair's screenshots there instead of only in a temp dir).
"""

from __future__ import annotations

import re

from browser import PAIR, needs_chromium, open_tab, shoot, step_until
from playwright.sync_api import expect

REAL = PAIR != "tiny"
RUN_MS = 120_000 if not REAL else 900_000

pytestmark = needs_chromium


def test_step_through_a_rejection_and_a_full_acceptance(page, tmp_path):
    open_tab(page, "Step-through")
    page.get_by_text("Sampled: see a rejection and its residual").click()
    expect(page.locator("#st-temperature input[type=number]")).to_have_value("0.8")
    step_until(page, "③ Residual")
    stages = page.locator("#st-stages")
    assert "min(1, p/q)" in stages.inner_text() and "reject" in stages.inner_text()
    assert page.locator("#st-plot .js-plotly-plot .barlayer .trace").count() >= 3  # q, p, residual
    assert (
        page.locator("#st-text .tok.rejected").count() > 0
        and page.locator("#st-text .tok.resampled").count() > 0
    )
    page.locator("#st-stages").scroll_into_view_if_needed()
    shoot(page, tmp_path, "stepthrough.png")
    step_until(page, "③ Bonus token")
    assert "γ + 1 tokens for a single target call" in stages.inner_text()
    shoot(page, tmp_path, "stepthrough-bonus.png")


def test_theory_view_measures_and_draws_the_curve_with_the_points(page, tmp_path):
    open_tab(page, "Theory vs measurement")
    assert "No measurement yet" in page.locator("#th-explain").inner_text()
    gammas = (2, 4, 6) if REAL else (4,)
    for gamma in gammas:
        page.locator("#th-gamma input[type=number]").fill(str(gamma))
        page.locator("#th-gamma input[type=number]").press("Enter")
        page.locator("#th-measure").click()
        page.get_by_text(f"Measured at γ = {gamma}").wait_for(timeout=RUN_MS)
    explain = page.locator("#th-explain").inner_text()
    assert "Recommended γ" in explain and "acceptance rate" in explain and "cost ratio" in explain
    assert page.locator("#th-plot .js-plotly-plot .scatterlayer .trace").count() >= 2  # curve and points
    assert page.locator("#th-points [role=grid]").get_attribute("aria-rowcount") == str(1 + len(gammas))
    shoot(page, tmp_path, "theory.png")


def test_lab_sweep_and_export_tabs(page, tmp_path):
    open_tab(page, "Losslessness lab")
    page.locator("#lab-run").click()
    page.get_by_text("No detectable difference at 400 draws").wait_for(timeout=RUN_MS)
    assert page.locator("#lab-plot .js-plotly-plot .barlayer .trace").count() == 2
    shoot(page, tmp_path, "lab.png")

    open_tab(page, "Sweep")
    page.locator("#sw-gammas textarea, #sw-gammas input").first.fill("")
    page.locator("#sw-run").click()
    page.get_by_text("γ values: give at least one value").first.wait_for(timeout=30_000)
    page.locator("#sw-gammas textarea, #sw-gammas input").first.fill("1,2,3")  # not the pair's γ (4)
    page.locator("#sw-drafts textarea, #sw-drafts input").first.fill("draft_vocab=200,256")
    page.locator("#sw-run").click()
    page.get_by_text("Done: 6 settings measured").wait_for(timeout=RUN_MS)
    assert page.locator("#sw-table [role=grid]").get_attribute("aria-rowcount") == "7"  # header + 6 rows
    assert page.locator("#sw-files a").count() >= 2  # CSV and JSON links
    fastest = re.search(r"The fastest \(model, γ = (\d)\) is in the Export tab", page.locator("#sw-status").inner_text())
    assert fastest, page.locator("#sw-status").inner_text()
    shoot(page, tmp_path, "sweep.png")

    open_tab(page, "Export")  # the Sweep's fastest row became these settings
    expect(page.locator("#ex-gamma input[type=number]")).to_have_value(fastest[1])
    expect(page.locator("#ex-vllm-serve")).to_contain_text(f'"num_speculative_tokens": {fastest[1]}')
    page.get_by_role("tab", name="llama.cpp").click()
    expect(page.locator("#ex-llamacpp")).to_contain_text("--spec-draft-n-max")
    assert page.locator("#ex-llamacpp button").count() >= 1  # the copy button
    shoot(page, tmp_path, "export.png")
