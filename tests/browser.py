"""Shared by the browser tests (their fixtures, url, browser and page, are in conftest.py):
Debian's headless Chromium, never a downloaded browser. UI_BROWSER_PAIR picks the pair
(default: tiny, random weights, no download).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAIR = os.environ.get("UI_BROWSER_PAIR", "tiny")
STEP_MS = 60_000 if PAIR == "tiny" else 900_000  # the first real step may load (and convert) the pair
# The page has settled: no Gradio progress shown, and no finite animation (plots, the status box
# fading in) still running. Endless ones (spinners) do not count.
SETTLED = """() => !document.querySelector('.progress-text, .eta-bar') && document.getAnimations().every(
    a => a.playState !== 'running' || a.effect.getComputedTiming().iterations === Infinity)"""


def shoot(page, tmp_path, name: str) -> None:
    """A full-page screenshot once the page has settled; copied to $UI_SCREENSHOT_DIR when set
    (how the README's screenshots are made)."""
    page.wait_for_function(SETTLED, timeout=60_000)  # a condition, not a fixed pause
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("UI_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["UI_SCREENSHOT_DIR"]) / name)

needs_chromium = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed (CI installs it)"),
]


def open_tab(page, title: str) -> None:
    page.get_by_role("tab", name=title).click()


def step_until(page, text: str, clicks: int = 40) -> int:
    """Press Next step until the stage panel shows `text`; returns the clicks it took."""
    stages = page.locator("#st-stages")
    for i in range(1, clicks + 1):
        before = re.search(r"Step (\d+):", page.locator("#st-status").inner_text())
        page.locator("#st-next").click()
        # Wait for this click's step, not a flicker of the status box: its progress overlay changes its
        # text while a job runs, and the stage panel, a separate component, may be redrawn after it.
        # So: a new step number in the status, and the same number in the stage panel.
        page.wait_for_function(
            "before => { const s = document.querySelector('#st-status').innerText;"
            " if (s.includes('⚠')) return true;"
            " const n = /Step (\\d+):/.exec(s);"
            " if (n === null) return /finished/.test(s);"
            " return n[1] !== before"
            "     && document.querySelector('#st-stages').innerText.includes(`Step ${n[1]}:`); }",
            arg=before[1] if before else None,
            timeout=STEP_MS,
        )
        assert "⚠" not in page.locator("#st-status").inner_text()
        if text in stages.inner_text():
            return i
        if "run has finished" in page.locator("#st-status").inner_text():
            page.locator("#st-reset").click()
            page.get_by_text("Back at the start").wait_for(timeout=30_000)
            seed = page.locator("#st-seed input")
            if not seed.is_visible():  # it sits in the tab's closed "More settings"
                page.get_by_text("More settings").locator("visible=true").first.click()
            seed.fill(str(int(seed.input_value() or 0) + 1))
            seed.press("Enter")
    pytest.fail(f"no {text!r} in {clicks} steps")
