"""The page's γ follows the machine (measure/bench/follow.py): the first load of a pair that states its
α measures c and v(k) and says the γ they call for; a race whose γ the user left at the pair's value
runs at that γ, one the user set is kept; after a race the advice takes the α the race measured and
never forecasts less than the race measured. Real races of the tiny pair, given an α; the γ followed
from a hand-made curve where a test reads it."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import gradio as gr
import pytest

from playground.app.shared import controls
from playground.config import RunConfig
from playground.measure.bench import follow
from playground.models.registry import PAIR_KNOBS

STEEP = (1.0, 1.5, 2.2, 2.9, 3.6, 4.3, 5.0)  # each row most of a step: α 0.8 at c 0.1 calls for γ 1
FLAT = (1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12)  # rows almost free: a long γ pays


def values(**changes) -> dict:
    return {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
            "pair": "tiny", "max_new_tokens": 12, "temperature": 0.0, "runner": "eager", **changes}


def race(ctx, view, gamma_set: bool = True, prompt: str = "def add(a, b):", **changes) -> list[str]:
    from playground.app.race import tab as tab_race

    form = tab_race.RaceForm(prompt, "", values(**changes), gamma_set)
    frames = list(tab_race.handle(ctx, view, form))
    return [html.unescape(f[view.status]) for f in frames if view.status in f]


@pytest.fixture
def ran(monkeypatch):
    """The settings each race's frames were made with: the real race_frames, watched."""
    from playground.app.race import tab as tab_race

    seen, real = [], tab_race.race_frames

    def watched(pair, prompt, system, settings, **kw):
        seen.append(settings)
        return real(pair, prompt, system, settings, **kw)

    monkeypatch.setattr(tab_race, "race_frames", watched)
    return seen


@pytest.fixture
def fixed(race_tab, monkeypatch):
    """The tiny pair with an α of 0.8, its γ followed from a hand-made curve (c 0.1, STEEP): γ 1,
    where models.yaml says 4. Nothing is measured at load: the pair's γ is already known."""
    ctx, _ = race_tab
    monkeypatch.setitem(ctx.registry.pairs, "tiny", replace(ctx.registry.pair("tiny"), alpha=0.8))
    followed = follow.chosen(0.8, 0.1, STEEP, ctx.registry.pair("tiny").gamma, "eager")
    assert followed.gamma == 1 != ctx.registry.pair("tiny").gamma
    monkeypatch.setitem(ctx.followed, "tiny", followed)
    return followed


def test_the_first_load_follows_the_pairs_gamma_and_the_page_suggests_it(race_tab):
    ctx, view = race_tab
    ctx.registry.pairs["tiny"] = replace(ctx.registry.pair("tiny"), alpha=0.8)
    ctx.followed.pop("tiny", None)
    ctx.followed_at.clear()
    fixed = ctx.registry.pair("tiny").gamma
    assert controls.pair_defaults(ctx, "tiny")[1 + PAIR_KNOBS.index("gamma")] == fixed  # nothing measured yet
    said = race(ctx, view, gamma=8)  # longer than any γ followed (follow.MAX_GAMMA is 6)
    followed = ctx.followed["tiny"]
    assert any("so the pair's γ follows it" in s for s in said)
    assert any(followed.line() in s for s in said)  # said in the status box as the load ends
    assert "Done." in said[-1] and "This race ran at γ 8;" not in said[-1]  # the race's own α speaks now
    assert controls.pair_defaults(ctx, "tiny")[1 + PAIR_KNOBS.index("gamma")] == followed.gamma
    assert ctx.suggested("tiny", "tiny-target")["gamma"] == fixed  # another draft: the α is not its own
    again = race(ctx, view, gamma=followed.gamma)  # measured once per app run
    assert not any("follows it" in s for s in again) and "This race ran at the pair's γ here" in again[-1]


def test_a_prompt_of_another_context_bucket_follows_the_gamma_again_once(race_tab, monkeypatch):
    """Issue 52, item 6: c and v(k) are measured for the run's length (its context bucket: the prompt and
    its new tokens), so a race whose prompt takes it into another bucket follows γ again, once; coming
    back to a length followed before suggests its γ again without measuring."""
    ctx, view = race_tab
    ctx.registry.pairs["tiny"] = replace(ctx.registry.pair("tiny"), alpha=0.8)
    ctx.followed.pop("tiny", None)
    monkeypatch.setattr(ctx, "followed_at", {})  # nothing followed in this app run yet
    measured = []
    real = follow.measure

    def counted(pair, spec, run, store=None, prompt_tokens=None):
        measured.append(prompt_tokens)
        return real(pair, spec, run, store, prompt_tokens)

    monkeypatch.setattr(follow, "measure", counted)
    race(ctx, view)  # a 14-token prompt and 12 new tokens: runs up to 256 entries
    short = ctx.followed["tiny"]
    said = race(ctx, view, prompt="x" * 300)  # 300 tokens of the byte tokenizer: up to 1024
    assert short.context == 256 and ctx.followed["tiny"].context == 1024 and len(measured) == 2
    assert measured[1] >= 300 and any("so the pair's γ follows it" in s for s in said)
    said = race(ctx, view)  # back to a short prompt: its γ suggested again, nothing measured
    assert ctx.followed["tiny"] is short and len(measured) == 2 and not any("follows it" in s for s in said)


def test_the_first_race_runs_at_the_followed_gamma_when_gamma_is_untouched(race_tab, fixed, ran):
    from playground.app.race.tab import raced_gamma

    ctx, view = race_tab
    shown = ctx.registry.pair("tiny").gamma  # what the page's γ control shows until the user moves it
    said = race(ctx, view, gamma_set=False, gamma=shown)
    assert [s.gamma for s in ran] == [fixed.gamma]
    assert "Done." in said[-1] and f"This race ran at the pair's γ here: {fixed.line()}." in said[-1]
    assert raced_gamma(ctx, values(gamma=shown), False) == fixed.gamma  # the control then shows it
    race(ctx, view, gamma_set=False, gamma=shown, adaptive=True)  # adaptive: its first γ, as the benchmark's
    assert ran[-1].gamma == fixed.gamma


def test_a_gamma_the_user_set_is_kept(race_tab, fixed, ran):
    from playground.app.race.tab import raced_gamma

    ctx, view = race_tab
    shown = ctx.registry.pair("tiny").gamma
    race(ctx, view, gamma_set=True, gamma=shown)  # moved away and back, or an API call: as given
    race(ctx, view, gamma_set=False, gamma=3)  # not the pair's value: an example's, the board's winner
    race(ctx, view, gamma_set=False, gamma=shown, drafter="prompt_lookup")  # the pair's α is not its own
    race(ctx, view, gamma_set=False, gamma=shown, draft="tiny-target")
    assert [s.gamma for s in ran] == [shown, 3, shown, shown]
    for kept in (values(gamma=shown), values(gamma=3)):
        assert isinstance(raced_gamma(ctx, kept, kept["gamma"] == shown), type(gr.skip()))


def advice_of(text: str) -> tuple[float, int, float, float] | None:
    """(α, γ advised, its forecast, the speedup measured) as the note says them, None without advice."""
    found = re.search(r"At the α this race measured \(([\d.]+)\).*? calls for γ (\d+): a forecast ([\d.]+)× "
                      r"against the ([\d.]+)× this race measured", text)
    return None if found is None else (float(found[1]), int(found[2]), float(found[3]), float(found[4]))


@pytest.fixture
def measured_alpha(monkeypatch):
    """The α each race measured, as race_result hands it to the note (the real one, watched)."""
    from playground.app.race import tab as tab_race

    alphas, real = [], tab_race.race_result

    def watched(frame):
        alpha, speedup = real(frame)
        alphas.append(alpha)
        return alpha, speedup

    monkeypatch.setattr(tab_race, "race_result", watched)
    return alphas


@pytest.mark.parametrize("measured", [1.05, 9.0])
def test_the_advice_after_a_race_takes_its_alpha_and_never_forecasts_below_its_speedup(
        race_tab, fixed, measured_alpha, monkeypatch, measured):
    """The race's α as its frames measured it; its speedup fixed (a timing): below the forecast, then
    above any."""
    from playground.app.race import tab as tab_race

    ctx, view = race_tab
    monkeypatch.setitem(ctx.followed, "tiny", follow.chosen(0.8, 0.01, FLAT, 4, "eager"))  # long γ pays
    real = tab_race.race_result
    monkeypatch.setattr(tab_race, "race_result", lambda frame: (real(frame)[0], measured))
    said = race(ctx, view, gamma=1)[-1]
    alpha = measured_alpha[-1]
    assert alpha is not None and alpha != 0.8  # the race's own, not the α models.yaml states
    best = follow.chosen(alpha, 0.01, FLAT, 4, "eager")
    assert best.gamma > 1 and 1.05 < best.forecast < 9.0  # one branch each
    if measured < best.forecast:
        assert advice_of(said) == (round(alpha, 2), best.gamma, round(best.forecast, 2), measured)
        assert f"Set γ to {best.gamma} to race it." in said
    else:  # nothing forecast beats what was measured: no γ is advised, neither the race's α's nor the pair's
        assert advice_of(said) is None and "Set γ" not in said


def test_the_advice_of_a_real_race_never_forecasts_below_what_it_measured(race_tab, fixed, measured_alpha):
    ctx, view = race_tab
    for gamma in (1, 6):
        said = race(ctx, view, gamma=gamma)[-1]
        assert "Done." in said
        if (advice := advice_of(said)) is not None:
            _, advised, forecast, measured = advice
            assert advised != gamma and forecast > max(measured, 1.0)
            assert advised == follow.chosen(measured_alpha[-1], fixed.c, fixed.v, 4, "eager").gamma
