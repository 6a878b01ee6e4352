"""The Drafts tab in headless Chromium: the board on the tiny pair (every drafter it can serve), its
leaderboard and map read back, and the winner handed to the Race and Export tabs.

README screenshot of the real default pair:
    UI_BROWSER_PAIR=default UI_SCREENSHOT_DIR=assets python -m pytest -m browser tests/app/board
"""

from __future__ import annotations

from browser import PAIR, needs_chromium, open_tab, shoot
from playwright.sync_api import expect

from playground.measure.bench.board import lineup
from playground.models.registry import load_registry

RUN_MS = 180_000 if PAIR == "tiny" else 3_600_000

pytestmark = needs_chromium


def test_the_board_ranks_every_drafter_draws_the_map_and_hands_on_the_winner(page, tmp_path):
    registry = load_registry()
    every = lineup.available(registry, registry.pair(PAIR))
    open_tab(page, "Drafts")
    for name in every:  # all chosen when the page opens
        expect(page.locator("#bd-drafters").get_by_label(name, exact=True)).to_be_checked()
    page.locator("#bd-budget input").fill("0.0001")
    page.locator("#bd-run").click()
    page.get_by_text("budget (minutes): the board needs at least about").first.wait_for(timeout=120_000)
    page.locator("#bd-budget input").fill("60")
    page.locator("#bd-run").click()
    page.get_by_text(f"Done: {len(every)} drafters measured").wait_for(timeout=RUN_MS)

    grid = page.locator("#bd-table [role=grid]")
    assert grid.get_attribute("aria-rowcount") == str(1 + len(every))  # header + a row per drafter
    cells = [t.strip() for t in page.locator("#bd-table").inner_text().split("\n") if t.strip()]
    first = cells[cells.index("runner") + 1:]  # the cells after the last header, row by row
    top, gamma = first[0], first[2]
    assert top in every and gamma.isdigit(), first
    verdict = page.locator("#bd-verdict").inner_text()
    assert "fastest plain decoding measured" in verdict and "Winner per category" in verdict
    assert page.locator("#bd-map .js-plotly-plot .contourlayer, #bd-map .js-plotly-plot .contour").count() >= 1
    assert page.locator("#bd-map .js-plotly-plot .scatterlayer .point").count() == len(every)  # a dot each
    assert page.locator("#bd-coverage .js-plotly-plot").count() == 1
    assert page.locator("#bd-files a").count() >= 2  # JSON and CSV (and the map's PNG where kaleido draws)
    page.locator("#bd-map").scroll_into_view_if_needed()
    shoot(page, tmp_path, "board.png")

    page.locator("#bd-hand").click()
    knob = "tree_depth" if top.endswith("tree") else "gamma"
    open_tab(page, "Export")
    expect(page.locator(f"#ex-{knob} input[type=number]")).to_have_value(gamma)
    open_tab(page, "Race")
    expect(page.locator(f"#{knob} input[type=number]")).to_have_value(gamma)
    # an entry's drafter: "tree" is the model's tree, "model@int8-cpu" the model drafter with a quantized draft
    drafter = "model" if top == "tree" else top.removesuffix("-tree").split(":")[0].split("@")[0]
    expect(page.locator("#drafter").get_by_label(drafter_label(drafter), exact=True)).to_be_checked()


def drafter_label(name: str) -> str:
    from playground.config import DRAFTER_LABELS

    return DRAFTER_LABELS[name]
