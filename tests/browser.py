"""Shared by the browser tests (their fixtures, url, browser and page, are in conftest.py):
Debian's headless Chromium, never a downloaded browser. UI_BROWSER_PAIR picks the pair
(default: tiny, random weights, no download).
"""

from __future__ import annotations

import os
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
# The page is still: no progress bar, no finite animation running (plots animate their redraws).
SETTLED = """() => !document.querySelector('.progress-text, .eta-bar') && document.getAnimations().every(
    a => a.playState !== 'running' || a.effect.getComputedTiming().iterations === Infinity)"""

needs_chromium = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed (CI installs it)"),
]
