"""Greedy divergences shown with their evidence (issue 48, item 5): where a greedy race's texts part,
the stats panel shows what the benchmark measures there (measure/bench/divergence.py): each run's
token, the target's top two and their margin, and the verdict (a near-tie below the benchmark's
threshold; a bug above it, and in float32 whatever the margin). Equal texts show none of it."""

from __future__ import annotations

import html
import re

import gradio as gr
import pytest

from playground.app.race import summary
from playground.app.race import tab as tab_race
from playground.app.race.frames import RaceFrame
from playground.app.shared import render
from playground.app.shared.context import build_context
from playground.app.shared.track import RunTrack
from playground.config import RunConfig
from playground.measure.bench.divergence import NEAR_TIE, Divergence, Side, margins_by_position

LABELS = {5: " tie", 6: " tied", 7: " other"}


def track(name: str, tokens: list[int]) -> RunTrack:
    t = RunTrack(name, render.SpanBuilder(str, str))
    t.tokens.extend(tokens)
    return t


def frame(plain: list[int], spec: list[int], divergence: Divergence | None = None, **kw) -> RaceFrame:
    return RaceFrame(track("autoregressive", plain), track("speculative", spec), RunConfig(pair="tiny"), done=True,
                     divergence=divergence, labels=LABELS, **kw)


def parted(margins: tuple[float, float], exact: bool) -> Divergence:
    """Token 3 (index 2): the plain run chose ' tie', the speculative run ' tied', by these margins."""
    plain, spec = margins
    return Divergence(2, Side(5, ((5, 0.5 + plain / 8), (6, 0.5 - plain / 8)), plain),
                      Side(6, ((6, 0.5 + spec / 8), (5, 0.5 - spec / 8)), spec), exact)


def text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_a_near_tie_in_bf16_shows_both_tokens_their_margins_and_the_threshold():
    page = summary.stats_html(frame([1, 2, 5, 3], [1, 2, 6, 3], parted((0.010, 0.017), exact=False),
                                    precision="bfloat16"))
    said = " ".join(text(page).split())
    assert 'id="divergence"' in page and "differs from the baseline at token 3" in said
    assert "the plain run wrote tie #5 , the speculative run wrote tied #6" in said
    assert "0.010" in said and "0.017" in said  # each run's margin, as the bench reports them
    assert "A near-tie" in said and f"below {NEAR_TIE:g} logit" in said and "bfloat16" in said


def test_a_clear_margin_is_called_a_bug_and_in_float32_so_is_any_divergence():
    wide = text(summary.stats_html(frame([1, 2, 5], [1, 2, 6], parted((2.5, 0.3), exact=False), precision="bfloat16")))
    assert "Not a near-tie" in wide and "2.500" in wide and "a bug" in wide
    exact = text(summary.stats_html(frame([1, 2, 5], [1, 2, 6], parted((0.010, 0.017), exact=True), precision="float32")))
    assert "A bug" in exact and "float32" in exact and "near-tie" not in exact.replace("Not a near-tie", "")


def test_equal_texts_show_no_evidence_and_a_race_under_way_says_it_will_measure():
    same = summary.stats_html(frame([1, 2, 3], [1, 2, 3]))
    assert "identical to the baseline" in same and 'id="divergence"' not in same and "margin" not in same
    running = summary.stats_html(RaceFrame(track("a", [1, 2, 5]), track("s", [1, 2, 6]), RunConfig(pair="tiny")))
    assert "measured when the race ends" in running and 'id="divergence"' not in running


# -- a real race whose verification rounds the other way ------------------------------------------


@pytest.fixture(scope="module")
def race_tab():
    ctx = build_context()
    with gr.Blocks():
        return ctx, tab_race.build(ctx)["view"]


def values(**changes) -> dict:
    return {**{n: getattr(RunConfig(), n) for n in RunConfig.names()},
            "pair": "tiny", "max_new_tokens": 16, "temperature": 0.0, "runner": "eager", "gamma": 3, **changes}


PROMPT = "def add(a, b):"


@pytest.fixture
def flipped(race_tab, flipped_verification):
    """The tiny target, its verification forwards rounding the other way (conftest.flipped_verification)."""
    ctx, _ = race_tab
    return flipped_verification(ctx.cache.get("tiny").target.model)


def test_a_race_whose_verification_rounds_the_other_way_shows_the_measured_margin(race_tab, flipped):
    from playground.engine.generate import SpecConfig, generate
    from playground.models.text import encode_prompt

    ctx, view = race_tab
    outputs = list(tab_race.handle(ctx, view, tab_race.RaceForm(PROMPT, "", values())))
    statuses = [html.unescape(o[view.status]) for o in outputs if view.status in o]
    assert any("rerun untimed, with detail" in s for s in statuses)  # said while the reruns run
    stats = [o[view.stats] for o in outputs if view.stats in o][-1]
    said = " ".join(text(stats).split())
    first = int(re.search(r"differs from the baseline at token (\d+)", said).group(1))
    assert 'id="divergence"' in stats and f"First difference at token {first}" in said
    # the margin shown is the plain run's, as an independent run with detail measures it at that token
    pair = ctx.cache.get("tiny")
    ids = encode_prompt(pair.tokenizer, PROMPT)
    plain = list(generate(flipped, ids, SpecConfig(detail=2, max_new_tokens=16, runner="eager"),
                          eos_token_ids=pair.eos))
    assert f"{margins_by_position(plain)[first - 1]:.3f}" in said
    assert "A bug" in said and "float32" in said  # the tiny target computes in float32: nothing excuses it


def test_an_identical_race_shows_no_evidence(race_tab):
    ctx, view = race_tab
    *_, last = tab_race.handle(ctx, view, tab_race.RaceForm(PROMPT, "", values()))
    assert "identical to the baseline" in last[view.stats] and 'id="divergence"' not in last[view.stats]


def test_stop_during_the_reruns_ends_them_within_a_step(race_tab, flipped, monkeypatch):
    import playground.engine.generate as engine

    ctx, view = race_tab
    real, after_stop = engine.generate, []

    def counted(*args, **kwargs):
        steps = [0]
        if ctx.stops.flags.get(None) is not None and ctx.stops.flags[None].is_set():
            after_stop.append(steps)
        for event in real(*args, **kwargs):
            steps[0] += 1
            yield event

    monkeypatch.setattr(engine, "generate", counted)
    outputs = []
    for output in tab_race.handle(ctx, view, tab_race.RaceForm(PROMPT, "", values(max_new_tokens=40))):
        outputs.append(output)
        if "rerun untimed, with detail" in html.unescape(output.get(view.status, "")):
            ctx.stops.press(None)
    assert "Stopped." in outputs[-1][view.status] and 'id="divergence"' not in outputs[-2].get(view.stats, "")
    assert after_stop and all(steps[0] <= 1 for steps in after_stop), after_stop  # each rerun: one step, then stopped
