"""The Your models tab in headless Chromium, on a machine of its own (tests/stores.py: the tiny pair as
float32 checkpoints in a hub cache, an embedding model in Ollama's store): scan, pick a target, read the
draft's class and estimate, keep the pair; the Race tab's pair list then holds it, selected, and races it
with greedy output identical to the target's own.

Screenshot: UI_SCREENSHOT_DIR=assets python -m pytest -m browser tests/app/yours
"""

from __future__ import annotations

import socket

import pytest
from browser import needs_chromium, open_tab, shoot
from playwright.sync_api import expect
from stores import DRAFT, TARGET, own_machine, shelve

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    """The app on a free port, built on a machine whose stores hold the tiny pair (overrides conftest's)."""
    from playground.app.demo import build_demo

    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("machine")
        shelve(own_machine(root, patch), root / "made")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        demo = build_demo(default_pair="tiny")
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield f"http://127.0.0.1:{port}/"
        demo.close()


def pick(page, dropdown: str, option: str) -> None:
    page.locator(f"{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def test_scan_pick_keep_and_race_a_pair_of_your_models(page, tmp_path):
    open_tab(page, "Your models")
    page.locator("#ym-scan").click()
    page.get_by_text("3 models found, 2 usable here").wait_for(timeout=60_000)
    table = page.locator("#ym-table").inner_text()
    assert TARGET in table and "not a causal LM: an embedding model" in table
    pick(page, "#ym-target", TARGET)
    pairing = page.locator("#ym-pairing")
    expect(pairing).to_contain_text("same tokenizer", timeout=30_000)
    expect(pairing).to_contain_text("Estimate")
    expect(page.locator("#ym-draft input")).to_have_value(f"{DRAFT} (same tokenizer)")
    assert "not usable" in page.locator("#ym-drafts").inner_text()
    page.locator("#ym-name textarea, #ym-name input").first.fill("tiny-kept")
    page.locator("#ym-keep").click()
    page.get_by_text("Kept 'tiny-kept'").wait_for(timeout=60_000)
    expect(page.locator("#ym-kept")).to_contain_text("tiny-kept")
    shoot(page, tmp_path, "your-models.png")

    open_tab(page, "Race")
    expect(page.locator("#pair input")).to_have_value("tiny-kept (yours)")  # offered, and selected
    page.get_by_role("button", name="Run the race").click()
    page.get_by_text("greedy: speculative text identical to the baseline").wait_for(timeout=120_000)
