"""The lab tab's fast mode, its handler called directly on the tiny pair from the registry."""

from __future__ import annotations

import html

import gradio as gr
import pytest

from playground.app.lab import tab as tab_lab
from playground.app.shared.flow import outputs


def draw_fast(ctx, view, *values):
    """The Draw fast handler on the lab's own view (its dicts are keyed by the view's components)."""
    return tab_lab.handle(ctx, view, tab_lab.FastLabForm(*values))


def test_fast_lab_redraws_while_drawing_and_ends_with_the_verdict(tab_view):
    ctx, view = tab_view(tab_lab)
    frames = list(draw_fast(ctx, view, "def", "tiny", 20_000, 1.0, 0, 1.0, 0))
    drawing = [f for f in frames if "Drawing:" in f[view.status]]
    assert len(drawing) > 5  # the histograms and the distance plot update as N grows
    _, convergence, verdict, status = (frames[-1][c] for c in outputs(view))
    assert "No detectable difference at 20000 draws" in html.unescape(verdict)
    assert "Done: 20000 draws each way" in status and "Random-weight" in status
    names = [t.name for t in convergence.data]
    assert names == ["speculative vs p", "target alone vs p", "∝ 1/√N"]
    ns = list(convergence.data[0].x)
    assert ns[-1] == 20_000 and ns == sorted(ns)
    # the control's distance falls roughly like 1/√N over two decades
    direct = list(convergence.data[1].y)
    assert direct[-1] < direct[0] / 4


@pytest.mark.parametrize(
    "draws, changes, message",
    [
        (0, {}, "N fast draws must be a whole number in [1, 100000], got 0"),
        (2.5, {}, "N fast draws must be a whole number in [1, 100000], got 2.5"),
        (10, {"temperature": 0}, "temperature must be above 0 for the lab"),
    ],
)
def test_fast_lab_bad_input_is_a_message_naming_the_field(tab_view, draws, changes, message):
    ctx, view = tab_view(tab_lab)
    values = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, **changes}
    runs = draw_fast(ctx, view, "hi", "tiny", draws, *values.values())
    with pytest.raises(gr.Error) as raised:
        list(runs)
    assert message in str(raised.value)
