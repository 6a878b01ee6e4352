"""The drafted tree in the Step-through tab, in headless Chromium, as a person sees it.

Runs on the tiny random pair by default. For the README screenshot of the real default pair:
    UI_BROWSER_PAIR=default UI_SCREENSHOT_DIR=assets \
        python -m pytest -m browser tests/app/stepthrough/test_tree_browser.py
"""

from __future__ import annotations

import re

from browser import needs_chromium, open_tab, shoot, step_until
from playwright.sync_api import expect

pytestmark = needs_chromium


def test_step_through_draws_the_tree_with_its_accepted_path(page, tmp_path):
    open_tab(page, "Step-through")
    page.get_by_text("Sampled: see a rejection and its residual").click()
    expect(page.locator("#st-temperature input[type=number]")).to_have_value("0.8")
    page.locator("#st-speculation label").filter(has_text=re.compile(r"^\s*tree\s*$")).click()
    step_until(page, "verified a tree")
    stages = page.locator("#st-stages").inner_text()
    assert "verified a tree" in stages and "min(1, p/q)" in stages and "tried with" in stages
    plot = page.locator("#st-plot .js-plotly-plot")
    expect(plot.locator(".gtitle")).to_contain_text("Draft tree:")
    assert plot.locator(".scatterlayer .trace").count() == 4  # greyed edges, accepted path, next token, nodes
    page.locator("#st-plot").scroll_into_view_if_needed()
    shoot(page, tmp_path, "stepthrough-tree.png")
