"""Shared by the browser tests (their fixtures, url, browser and page, are in conftest.py):
Debian's headless Chromium, never a downloaded browser. UI_BROWSER_PAIR picks the pair
(default: tiny, random weights, no download).
"""

from __future__ import annotations

import os
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
