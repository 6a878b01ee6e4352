"""The p/q explorer tab's handlers called directly (no browser, no model)."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.measure.teach.explorer import PRESETS, TOKENS
from playground.app.explorer import tab as tab_explorer
from playground.app.shared.flow import outputs


@pytest.fixture(scope="module")
def sample():
    """The Sample handler on the tab's own view (its dicts are keyed by the view's components)."""
    with gr.Blocks():
        view = tab_explorer.build(None)["view"]
    return (lambda *values: tab_explorer.handle_sample(view, form(*values))), view


def form(*values) -> tab_explorer.SampleForm:
    """The Sample form of the page's values in API order: six p weights, six q weights, N, seed."""
    n = len(TOKENS)
    return tab_explorer.SampleForm(p={f"p{i}": w for i, w in enumerate(values[:n])},
                                   q={f"q{i}": w for i, w in enumerate(values[n:2 * n])},
                                   draws=values[-2], seed=values[-1])


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


def test_sampling_streams_the_histogram_and_ends_with_the_verdict(sample):
    handler, view = sample
    preset = PRESETS["draft misses a token the target likes"]
    frames = list(handler(*preset.p, *preset.q, 4000, 2**63 - 1))  # any seed the seed knob allows
    assert len(frames) > 2  # the histogram grows on screen
    figure, note, status = (frames[-1][c] for c in outputs(view))
    assert sum(figure.data[0].y) == pytest.approx(1.0)
    assert "No detectable difference from p" in note and "Done: 4,000 draws" in status


@pytest.mark.parametrize("draws", [0, 10**6, 2.5])
def test_sampling_refuses_bad_draw_counts(sample, draws):
    preset = PRESETS["identical"]
    with pytest.raises(gr.Error, match="N draws must be a whole number"):
        list(sample[0](*preset.p, *preset.q, draws, 0))


def test_sampling_refuses_a_seed_outside_the_seed_knob(sample):
    preset = PRESETS["identical"]
    with pytest.raises(gr.Error, match=r"seed must be a whole number in \[0, 9223372036854775807\], got -1"):
        list(sample[0](*preset.p, *preset.q, 100, -1))
