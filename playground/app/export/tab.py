"""The Export tab: the chosen settings as ready-to-paste configuration for vLLM, llama.cpp's server
and transformers. Snippets are pure functions of the settings (playground/export.py); nothing runs
a model here, so the snippets redraw on every change without queueing.
"""

from __future__ import annotations

import html

import gradio as gr

from playground.config import RunConfig
from playground.measure import export
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.flow import in_order

TITLE = "Export"
SNIPPET_BOXES = (  # (tab, [(language, label, elem_id)]) in the order snippets() returns them
    ("vLLM", [("shell", "vllm serve", "ex-vllm-serve"), ("python", "vLLM in Python", "ex-vllm-python")]),
    ("llama.cpp", [("shell", "llama-server", "ex-llamacpp")]),
    ("transformers", [("python", "generate(assistant_model=…)", "ex-transformers")]),
)


def build(ctx: AppContext) -> dict:
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
            codes = []
            with gr.Tabs():
                for tab, boxes in SNIPPET_BOXES:
                    with gr.Tab(tab):
                        for language, label, elem_id in boxes:
                            text = first[1 + len(codes)]
                            codes.append(gr.Code(text, language=language, label=label, wrap_lines=True,
                                                 elem_id=elem_id))
    outputs = [notes, *codes]
    handler = export_handler(ctx)
    for component in knobs.values():
        component.change(
            handler, list(knobs.values()), outputs, queue=False, preprocess=False, api_visibility="private"
        )
    def export_event(**values) -> tuple:  # the API takes the knobs by name
        return handler(*in_order(values))

    gr.Button("Refresh snippets", size="sm", elem_id="ex-refresh").click(
        export_event, None, outputs, inputs_kwargs=knobs, queue=False, preprocess=False, api_name="export"
    )
    return {"knobs": knobs}


def take(run: dict | None) -> list:
    """Another tab's run configuration (the Sweep's fastest row) as values for these controls; the
    snippets follow through the controls' change events."""
    if not run:
        return [gr.skip() for _ in RunConfig.names()]
    return [run[name] for name in RunConfig.names()]


def default_values(ctx: AppContext) -> list:
    spec = ctx.registry.pair(ctx.default_pair)
    defaults = RunConfig(pair=spec.name, **spec.suggested())
    return [getattr(defaults, n) for n in RunConfig.names()]


def export_handler(ctx: AppContext):
    def handler(*knobs) -> tuple:
        return snippets(ctx, list(knobs))

    return handler


def snippets(ctx: AppContext, knobs: list) -> tuple:
    """(notes HTML, vllm serve, vLLM Python, llama-server, transformers); a bad knob is said in the notes."""
    from playground.engine import factory
    try:
        settings = RunConfig.from_values(dict(zip(RunConfig.names(), knobs, strict=True)))
        factory.spec_config(settings)
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
