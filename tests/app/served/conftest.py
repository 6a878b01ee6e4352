"""The Served tab built once per test module on the tiny pair; the servers a module's session started
(its module-level SESSION) are stopped when the module ends."""

from __future__ import annotations

import gradio as gr
import pytest


@pytest.fixture(scope="module")
def served_tab(request):
    from playground.app.served import tab
    from playground.app.shared.context import build_context

    ctx = build_context(None)
    ctx.default_pair = "tiny"
    with gr.Blocks():
        handles = tab.build(ctx)
    yield ctx, handles
    handles["servers"].stop_session(getattr(request.module, "SESSION", None))
