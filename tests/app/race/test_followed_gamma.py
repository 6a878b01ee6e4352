"""The page's γ suggestion follows the machine (measure/bench/follow.py): the first load of a pair
that states its α measures c and v(k) and says the γ they call for; a race at another γ ends saying
which; the pair dropdown then suggests it. Real races of the tiny pair, given an α."""

from __future__ import annotations

import html
from dataclasses import replace

from playground.app.shared import controls
from playground.config import RunConfig
from playground.models.registry import PAIR_KNOBS


def race(ctx, view, **changes) -> list[str]:
    from playground.app.race import tab as tab_race

    values = {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
              "pair": "tiny", "max_new_tokens": 12, "temperature": 0.0, "runner": "eager", **changes}
    frames = list(tab_race.handle(ctx, view, tab_race.RaceForm("def add(a, b):", "", values)))
    return [html.unescape(f[view.status]) for f in frames if view.status in f]


def test_the_first_load_follows_the_pairs_gamma_and_the_page_suggests_it(race_tab):
    ctx, view = race_tab
    ctx.registry.pairs["tiny"] = replace(ctx.registry.pair("tiny"), alpha=0.8)
    fixed = ctx.registry.pair("tiny").gamma
    assert controls.pair_defaults(ctx, "tiny")[1 + PAIR_KNOBS.index("gamma")] == fixed  # nothing measured yet
    said = race(ctx, view, gamma=8)  # longer than any γ followed (follow.MAX_GAMMA is 6)
    followed = ctx.followed["tiny"]
    assert any("so the pair's γ follows it" in s for s in said)
    assert any(followed.line() in s for s in said)  # said in the status box as the load ends
    assert "Done." in said[-1] and f"This race ran at γ 8; {followed.line()}" in said[-1]
    assert controls.pair_defaults(ctx, "tiny")[1 + PAIR_KNOBS.index("gamma")] == followed.gamma
    assert ctx.suggested("tiny", "tiny-target")["gamma"] == fixed  # another draft: the α is not its own
    again = race(ctx, view, gamma=followed.gamma)  # measured once per app run; at the followed γ, no note
    assert not any("follows it" in s for s in again) and "This race ran at" not in again[-1]
