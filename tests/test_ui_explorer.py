"""The p/q explorer tab's handlers called directly (no browser, no model)."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.measure.explorer import PRESETS, TOKENS
from playground.app.explorer import tab as tab_explorer


def test_a_preset_sets_every_slider_and_redraws_every_view():
    out = tab_explorer.choose_preset("identical")
    n = len(TOKENS)
    assert out[0] == PRESETS["identical"].lesson
    assert list(out[1 : 1 + 2 * n]) == [*PRESETS["identical"].p, *PRESETS["identical"].q]
    overlap_note = out[1 + 2 * n + 1]
    assert "α = 1.00" in overlap_note


def test_redraw_names_the_bad_slider():
    weights = [0.0] * len(TOKENS) + [1.0] * len(TOKENS)
    with pytest.raises(gr.Error, match="p must have a positive weight"):
        tab_explorer.redraw(*weights)


def test_sampling_streams_the_histogram_and_ends_with_the_verdict():
    preset = PRESETS["draft misses a token the target likes"]
    frames = list(tab_explorer.sample_handler(*preset.p, *preset.q, 4000, 3))
    assert len(frames) > 2  # the histogram grows on screen
    figure, note, status = frames[-1]
    assert sum(figure.data[0].y) == pytest.approx(1.0)
    assert "No detectable difference from p" in note and "Done: 4,000 draws" in status


@pytest.mark.parametrize("draws", [0, 10**6, 2.5])
def test_sampling_refuses_bad_draw_counts(draws):
    preset = PRESETS["identical"]
    with pytest.raises(gr.Error, match="N draws must be a whole number"):
        list(tab_explorer.sample_handler(*preset.p, *preset.q, draws, 0))
