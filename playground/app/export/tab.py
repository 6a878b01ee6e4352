"""The Export tab: the chosen settings as ready-to-paste configuration for vLLM, llama.cpp's server
and transformers. Snippets are pure functions of the settings (playground/export.py); nothing runs
a model here, so the snippets redraw on every change without queueing.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

from playground.config import RunConfig
from playground import export
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.flow import outputs

TITLE = "Export"
SNIPPET_BOXES = (  # (tab, [(the view's field, language, label, elem_id)])
    ("vLLM", [("vllm_serve", "shell", "vllm serve", "ex-vllm-serve"),
              ("vllm_python", "python", "vLLM in Python", "ex-vllm-python")]),
    ("llama.cpp", [("llama_server", "shell", "llama-server", "ex-llamacpp")]),
    ("transformers", [("transformers", "python", "generate(assistant_model=…)", "ex-transformers")]),
)


@dataclass(frozen=True)
class ExportView:
    """The notes and one box per snippet; field order is the API's result order."""

    notes: gr.HTML
    vllm_serve: gr.Code
    vllm_python: gr.Code
    llama_server: gr.Code
    transformers: gr.Code


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
            shown = {"notes": gr.HTML(first["notes"], elem_id="ex-notes")}
            with gr.Tabs():
                for tab, boxes in SNIPPET_BOXES:
                    with gr.Tab(tab):
                        for field, language, label, elem_id in boxes:
                            shown[field] = gr.Code(first[field], language=language, label=label, wrap_lines=True,
                                                   elem_id=elem_id)
    view = ExportView(**shown)
    handler = export_handler(ctx, view)

    def export_event(**values) -> dict:  # the knobs by name: the API takes them so too
        return handler(values)

    for component in knobs.values():
        component.change(export_event, None, outputs(view), inputs_kwargs=knobs, queue=False,
                         preprocess=False, api_visibility="private")
    gr.Button("Refresh snippets", size="sm", elem_id="ex-refresh").click(
        export_event, None, outputs(view), inputs_kwargs=knobs, queue=False, preprocess=False, api_name="export"
    )
    return {"knobs": knobs, "view": view}


def take(run: dict | None) -> list:
    """Another tab's run configuration (the Sweep's fastest row) as values for these controls; the
    snippets follow through the controls' change events."""
    if not run:
        return [gr.skip() for _ in RunConfig.names()]
    return [run[name] for name in RunConfig.names()]


def default_values(ctx: AppContext) -> dict:
    spec = ctx.registry.pair(ctx.default_pair)
    defaults = RunConfig(pair=spec.name, **spec.suggested())
    return {n: getattr(defaults, n) for n in RunConfig.names()}


def export_handler(ctx: AppContext, view: ExportView):
    """The snippets for the knobs' values (by name); a bad knob is said in the notes, the snippets stay."""

    def handler(knobs: dict) -> dict:
        try:
            texts = snippets(ctx, knobs)
        except ValueError as e:
            return {view.notes: f'<p style="color:#b42318">⚠ {html.escape(str(e))}</p>'}
        return {getattr(view, field): text for field, text in texts.items()}

    return handler


def snippets(ctx: AppContext, knobs: dict) -> dict[str, str]:
    """The notes HTML and each snippet, by ExportView field; ValueError names a bad knob."""
    from playground.engine import factory

    settings = RunConfig.from_values(knobs)
    factory.spec_config(settings)
    s = export.from_settings(ctx.registry, settings)
    return {
        "notes": notes_html(s),
        "vllm_serve": export.vllm_serve(s),
        "vllm_python": export.vllm_python(s),
        "llama_server": export.llamacpp_server(s),
        "transformers": export.transformers_snippet(s).code,
    }


def notes_html(s: export.ExportSettings) -> str:
    checked = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in export.CHECKED.items()
    )
    caveats = "".join(f"<li>{html.escape(c)}</li>" for c in export.caveats(s))
    return (
        f'<div style="font-size:13px"><p>Checked against:</p><ul>{checked}</ul>'
        f"<p>Good to know:</p><ul>{caveats}</ul></div>"
    )
