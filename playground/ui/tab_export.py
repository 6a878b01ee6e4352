"""The Export tab: the chosen settings as ready-to-paste configuration for vLLM, llama.cpp's server
and transformers. Snippets are pure functions of the settings (playground/export.py); nothing runs
a model here, so the snippets redraw on every change without queueing.
"""

from __future__ import annotations

import html

import gradio as gr

from .. import export
from . import controls
from .context import AppContext
from .settings import RunSettings

TITLE = "Export"


def build(ctx: AppContext) -> None:
    gr.Markdown(
        "Take what you tuned here to where you serve models. Set the knobs (or copy them from the Race or "
        "Sweep tab); the snippets follow. Copy with the button at the top right of each box."
    )
    with gr.Row():
        with gr.Column(scale=2):
            knobs, _ = controls.settings_controls(ctx)
            for name, component in knobs.items():  # other tabs have the same controls: keep ids unique
                component.elem_id = f"ex-{name}"
        with gr.Column(scale=3):
            first = snippets(ctx, default_values(ctx))
            notes = gr.HTML(first[0], elem_id="ex-notes")
            with gr.Tabs():
                with gr.Tab("vLLM"):
                    vllm_serve = gr.Code(
                        first[1],
                        language="shell",
                        label="vllm serve",
                        wrap_lines=True,
                        elem_id="ex-vllm-serve",
                    )
                    vllm_python = gr.Code(
                        first[2],
                        language="python",
                        label="vLLM in Python",
                        wrap_lines=True,
                        elem_id="ex-vllm-python",
                    )
                with gr.Tab("llama.cpp"):
                    llamacpp = gr.Code(
                        first[3],
                        language="shell",
                        label="llama-server",
                        wrap_lines=True,
                        elem_id="ex-llamacpp",
                    )
                with gr.Tab("transformers"):
                    transformers = gr.Code(
                        first[4],
                        language="python",
                        label="generate(assistant_model=…)",
                        wrap_lines=True,
                        elem_id="ex-transformers",
                    )
    outputs = [notes, vllm_serve, vllm_python, llamacpp, transformers]
    handler = export_handler(ctx)
    for component in knobs.values():
        component.change(
            handler, list(knobs.values()), outputs, queue=False, preprocess=False, api_visibility="private"
        )
    gr.Button("Refresh snippets", size="sm", elem_id="ex-refresh").click(
        handler, list(knobs.values()), outputs, queue=False, preprocess=False, api_name="export"
    )


def default_values(ctx: AppContext) -> list:
    spec = ctx.registry.pair(ctx.default_pair)
    defaults = RunSettings(pair=spec.name, gamma=spec.gamma, temperature=spec.temperature)
    return [getattr(defaults, n) for n in RunSettings.names()]


def export_handler(ctx: AppContext):
    def handler(*knobs) -> tuple:
        return snippets(ctx, list(knobs))

    return handler


def snippets(ctx: AppContext, knobs: list) -> tuple:
    """(notes HTML, vllm serve, vLLM Python, llama-server, transformers); a bad knob is said in the notes."""
    try:
        settings = RunSettings.from_values(dict(zip(RunSettings.names(), knobs, strict=True)))
        settings.spec_config()
        s = export.from_settings(ctx.registry, settings)
    except ValueError as e:
        return (f'<p style="color:#b42318">⚠ {html.escape(str(e))}</p>', *(gr.skip(),) * 4)
    return (
        notes_html(s),
        export.vllm_serve(s),
        export.vllm_python(s),
        export.llamacpp_server(s),
        export.transformers_snippet(s).code,
    )


def notes_html(s: export.ExportSettings) -> str:
    checked = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in export.CHECKED.items()
    )
    caveats = "".join(f"<li>{html.escape(c)}</li>" for c in export.caveats(s))
    return (
        f'<div style="font-size:13px"><p>Checked against:</p><ul>{checked}</ul>'
        f"<p>Good to know:</p><ul>{caveats}</ul></div>"
    )
