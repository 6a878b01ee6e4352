"""The run controls, built in RunSettings' field order so a tab can pass them as inputs.

Events that take these inputs should pass `preprocess=False`: Gradio's own range check says
"Value 99 is greater than maximum value 16" without naming the control, while RunSettings and
the engine reject bad values with the field's name and its allowed range. (Subclassing the
components to rename the error is no way out: Gradio then writes a .pyi stub into the source tree.)
"""

from __future__ import annotations

import gradio as gr

from .context import AppContext
from .settings import CHAIN, DRAFT_MODEL, DRAFTERS, MAX_NEW_TOKENS, QUANTIZATIONS, SPECULATIONS, RunSettings


def prompt_box() -> gr.Textbox:
    return gr.Textbox(
        label="Prompt",
        lines=5,
        max_lines=16,
        elem_id="prompt",
        placeholder="Ask for code, a chat answer, an edit, a translation…",
    )


def system_box() -> gr.Textbox:
    return gr.Textbox(
        label="System prompt (optional; used with chat models)", lines=1, max_lines=4, elem_id="system"
    )


def settings_controls(ctx: AppContext) -> tuple[dict[str, gr.components.Component], gr.Accordion]:
    """Every RunSettings field as a control, keyed by field name, in field order.

    The essentials are drawn where this is called; the rest go in a closed "More settings"
    accordion, returned too so a tab can add its own controls there (`with more: ...`).
    """
    spec = ctx.registry.pair(ctx.default_pair)
    c: dict[str, gr.components.Component] = {}
    c["pair"] = gr.Dropdown(
        ctx.pair_choices(), value=spec.name, label="Model pair (target + draft)", info=spec.description
    )
    c["drafter"] = gr.Radio(
        list(DRAFTERS),
        value=DRAFT_MODEL,
        label="Drafter",
        info="prompt lookup copies from the prompt: no second model, great for edits",
    )
    c["gamma"] = slider(
        "gamma", 1, 16, spec.gamma, label="γ lookahead", info="tokens drafted per target call"
    )
    tree_controls(c)
    with gr.Row():
        c["temperature"] = slider(
            "temperature", 0, 2, spec.temperature, step=0.05, label="Temperature", info="0 is greedy"
        )
        c["max_new_tokens"] = slider("max_new_tokens", 1, MAX_NEW_TOKENS, 96, label="Max new tokens")
    with gr.Accordion("More settings", open=False) as more:
        with gr.Row():
            c["adaptive"] = gr.Checkbox(
                False, label="Adaptive γ", info="+2 after a full accept, −1 after a rejection"
            )
            c["gamma_min"] = slider("gamma_min", 1, 32, 1, label="γ min")
            c["gamma_max"] = slider("gamma_max", 1, 32, 16, label="γ max")
        c["min_confidence"] = slider(
            "min_confidence",
            0,
            1,
            0,
            step=0.05,
            label="Draft confidence threshold",
            info="stop drafting when the draft's top probability falls below this",
        )
        with gr.Row():
            c["top_k"] = slider("top_k", 0, 200, 0, label="Top-k", info="0 is off")
            c["top_p"] = slider("top_p", 0.01, 1, 1, step=0.01, label="Top-p", info="1 is off")
            c["seed"] = gr.Number(0, minimum=0, maximum=2**31 - 1, precision=0, label="Seed")
        with gr.Row():
            c["ngram_min"] = slider("ngram_min", 1, 8, 1, label="Prompt lookup: n-gram min")
            c["ngram_max"] = slider("ngram_max", 1, 8, 3, label="n-gram max")
        c["draft_vocab"] = gr.Number(
            0,
            minimum=0,
            precision=0,
            label="Draft vocabulary: first N token ids (0 is all)",
            info="a cheaper draft output layer; still lossless, but the target's tokens past N are never drafted",
        )
        with gr.Row():
            c["target_quantization"] = gr.Dropdown(
                list(QUANTIZATIONS),
                value="default",
                label="Target quantization",
                info="default: as in models.yaml",
            )
            c["draft_quantization"] = gr.Dropdown(
                list(QUANTIZATIONS), value="default", label="Draft quantization"
            )
    for name, component in c.items():  # stable handles for browser tests and custom CSS
        component.elem_id = component.elem_id or name
    return {name: c[name] for name in RunSettings.names()}, more


def tree_controls(c: dict) -> None:
    """Chain or tree, and the tree's knobs (used by the draft model only)."""
    c["speculation"] = gr.Radio(
        list(SPECULATIONS),
        value=CHAIN,
        label="Speculation: chain or tree",
        info="tree: several candidates per position, all verified in one target call (draft model only)",
    )
    with gr.Row():
        c["tree_budget"] = slider("tree_budget", 1, 64, 16, label="Tree: most nodes")
        c["tree_depth"] = slider("tree_depth", 1, 16, 4, label="depth")
        c["tree_branching"] = slider("tree_branching", 1, 8, 2, label="children per node")


def slider(field: str, low, high, value, step=1, **kwargs) -> gr.Slider:
    """A slider for a RunSettings field (its elem_id); a whole-number step makes it send ints."""
    precision = 0 if float(step).is_integer() else None
    return gr.Slider(low, high, value=value, step=step, precision=precision, elem_id=field, **kwargs)


def pair_defaults(ctx: AppContext, name: str):
    """When the pair changes: its description, and its suggested γ and temperature."""
    spec = ctx.registry.pair(name)
    return gr.update(info=spec.description), spec.gamma, spec.temperature


def follow_pair(ctx: AppContext, knobs: dict) -> None:
    """Wire the pair dropdown of settings_controls() to show the chosen pair's description and set
    its suggested γ and temperature."""
    knobs["pair"].change(
        lambda name: pair_defaults(ctx, name),
        knobs["pair"],
        [knobs["pair"], knobs["gamma"], knobs["temperature"]],
        api_visibility="private",
    )
