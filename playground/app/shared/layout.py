"""Layout the tabs share: each opens the same way, so the page reads alike from tab to tab."""

from __future__ import annotations

import gradio as gr


def opening(intro: str, left: int = 3, right: int = 2) -> tuple[gr.Column, gr.Column]:
    """A tab's opening: its intro, then a row of two columns, the wider left one for what the tab runs
    on (its prompt or grid, its buttons, its status) and the right one for its pair and settings.
    Returned empty; the tab fills each with `with column:`, in the order its wiring needs."""
    gr.Markdown(intro)
    with gr.Row():
        return gr.Column(scale=left), gr.Column(scale=right)
