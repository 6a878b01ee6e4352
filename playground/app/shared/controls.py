"""The run controls, built in RunConfig's field order so a tab can pass them as inputs.

Events that take these inputs should pass `preprocess=False`: Gradio's own range check says
"Value 99 is greater than maximum value 16" without naming the control, while RunConfig and
the engine reject bad values with the field's name and its allowed range. (Subclassing the
components to rename the error is no way out: Gradio then writes a .pyi stub into the source tree.)
"""

from __future__ import annotations

import gradio as gr

from playground.config import DRAFT_MODEL_DRAFTERS, DRAFTER_LABELS, KNOBS, PROMPT_LOOKUP, SELF, TREE, RunConfig
from playground.models.registry import PAIR_KNOBS
from playground.app.shared.context import AppContext
from playground.app.shared.examples import RACE


def prompt_box(value: str = RACE[0][1]) -> gr.Textbox:
    """The prompt, starting on an example's (the first Race example unless a tab passes its own), so a
    tab's first run works without typing."""
    return gr.Textbox(
        value,
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
    """Every RunConfig field as a control, keyed by field name, in field order; labels, ranges,
    defaults and help come from the record (config.KNOBS), the pair's suggestions from models.yaml.

    The essentials are drawn where this is called; the rest go in a closed "More settings"
    accordion, returned too so a tab can add its own controls there (`with more: ...`).
    """
    spec = ctx.registry.pair(ctx.default_pair)
    c: dict[str, gr.components.Component] = {}
    c["pair"] = pair_control(ctx)
    c["drafter"] = control("drafter")
    c["draft"] = gr.Dropdown(ctx.draft_choices(), value="", label=KNOBS["draft"].label, info=KNOBS["draft"].help,
                             elem_id="draft")
    ctx.draft_controls.append(c["draft"])  # offered the models of pairs kept later (app/demo.py)
    c["gamma"] = control("gamma", spec.gamma)
    tree_controls(c)
    with gr.Row():
        c["temperature"] = control("temperature", spec.temperature)
        c["max_new_tokens"] = control("max_new_tokens")
    with gr.Accordion("More settings", open=False) as more:
        with gr.Row():
            for name in ("adaptive", "gamma_min", "gamma_max"):
                c[name] = control(name)
        c["min_confidence"] = control("min_confidence")
        with gr.Row():
            c["top_k"] = control("top_k")
            c["top_p"] = control("top_p")
            c["seed"] = control("seed")
        with gr.Row():
            c["ngram_min"] = control("ngram_min")
            c["ngram_max"] = control("ngram_max")
            c["kept_layers"] = control("kept_layers")
        c["draft_vocab"] = control("draft_vocab", spec.draft_vocab)
        with gr.Row():
            c["target_quantization"] = control("target_quantization")
            c["draft_quantization"] = control("draft_quantization")
        for name in RunConfig.names():  # a knob placed nowhere above still gets its control, here
            if name not in c:
                c[name] = control(name)
    for name, component in c.items():  # stable handles for browser tests and custom CSS
        component.elem_id = component.elem_id or name
    show_what_applies(c)
    return {name: c[name] for name in RunConfig.names()}, more


def pair_control(ctx: AppContext, elem_id: str = "pair") -> gr.Dropdown:
    """The model pair: the registry's pairs, the page's default selected, its description below.
    Every tab that picks a pair uses this one control."""
    spec = ctx.registry.pair(ctx.default_pair)
    dropdown = gr.Dropdown(ctx.pair_choices(), value=spec.name, label=KNOBS["pair"].label, info=spec.description,
                           elem_id=elem_id)
    ctx.pair_controls.append(dropdown)  # offered the pairs kept or raced later (app/demo.py)
    return dropdown


def describe_pair(ctx: AppContext, pair: gr.Dropdown) -> None:
    """Wire a pair_control() alone (no knobs to suggest) to show the chosen pair's description."""
    pair.change(lambda name: gr.update(info=ctx.registry.pair(name).description), pair, pair,
                queue=False, api_visibility="private", show_progress="hidden")


def control(name: str, value=None, *, low_open: bool | None = None, **component) -> gr.components.Component:
    """The control for one knob, built from its declaration (label, help, default, range); `value`
    is the pair's suggestion where models.yaml makes one. `low_open=True` leaves out the low end
    where a tab cannot use it (it says why); `component` passes on elem_id, visible and the like."""
    k = KNOBS[name]
    value = k.default if value is None else value
    common = dict(label=k.label, info=k.help, elem_id=name) | component
    if k.kind is bool:
        return gr.Checkbox(value, **common)
    if k.choices:
        choices = [(DRAFTER_LABELS.get(v, v), v) for v in k.choices]
        # the drafters stay side by side, each a click away, as the page teaches them; long technical
        # lists (runners, quantizations) fold into a dropdown
        widget = gr.Radio if len(choices) <= 3 or k.name == "drafter" else gr.Dropdown
        return widget(choices, value=value, **common)
    low = k.low if isinstance(k.low, (int, float)) else KNOBS[k.low].low
    if k.high - low > 10**4:  # a huge range: a number box, not a slider
        return gr.Number(value, minimum=low, maximum=k.high, precision=0 if k.kind is int else None, **common)
    if k.low_open if low_open is None else low_open:
        low = low + k.step  # the slider's first allowed position
    return slider(common.pop("elem_id"), low, k.high, value, step=k.step, **common)


# Controls that apply only for some values of another: (the knob that decides, the values that show
# them, the controls). The rest are hidden, so the page never offers a knob the run would ignore.
CONDITIONAL = (
    ("speculation", (TREE,), ("tree_budget", "tree_depth", "tree_branching", "tree_width")),
    ("drafter", (PROMPT_LOOKUP,), ("ngram_min", "ngram_max")),
    ("drafter", (SELF,), ("kept_layers",)),
    ("drafter", DRAFT_MODEL_DRAFTERS, ("draft", "draft_vocab")),  # the knobs of a draft model: none without one
    ("adaptive", (True,), ("gamma_min", "gamma_max")),
)
DECIDERS = tuple(dict.fromkeys(d for d, _, _ in CONDITIONAL))


def decided_by(decider: str) -> list[str]:
    """The controls `decider` shows or hides."""
    return [name for d, _, names in CONDITIONAL if d == decider for name in names]


def applying(c: dict, decider: str, value) -> dict:
    """{control: visibility update} for the controls that `decider` at `value` shows or hides."""
    return {c[name]: gr.update(visible=value in when) for d, when, names in CONDITIONAL if d == decider
            for name in names}


def show_what_applies(c: dict) -> None:
    """Hide what does not apply now, and again whenever a deciding knob changes (also when another
    tab or an example sets it) and when the page loads (a reload keeps no hidden state)."""
    for decider, when, names in CONDITIONAL:
        for name in names:
            c[name].visible = c[decider].value in when
    for decider in DECIDERS:
        c[decider].change(lambda value, d=decider: applying(c, d, value), c[decider],
                          [c[name] for name in decided_by(decider)], queue=False, api_visibility="private",
                          show_progress="hidden")
    page = gr.context.Context.root_block
    if page is not None:

        def on_load(*values) -> dict:
            return {k: v for d, value in zip(DECIDERS, values) for k, v in applying(c, d, value).items()}

        page.load(on_load, [c[d] for d in DECIDERS], [c[n] for d in DECIDERS for n in decided_by(d)],
                  queue=False, api_visibility="private", show_progress="hidden")


def tree_controls(c: dict) -> None:
    """Chain or tree, and the tree's knobs (used by the draft model only)."""
    c["speculation"] = control("speculation")
    with gr.Row():
        for name in ("tree_budget", "tree_depth", "tree_branching", "tree_width"):
            c[name] = control(name)


def slider(field: str, low, high, value, step=1, **kwargs) -> gr.Slider:
    """A slider for a RunConfig field (its elem_id); a whole-number step makes it send ints."""
    precision = 0 if float(step).is_integer() else None
    kwargs.setdefault("elem_id", field)
    return gr.Slider(low, high, value=value, step=step, precision=precision, **kwargs)


def pair_defaults(ctx: AppContext, name: str, draft: str = ""):
    """When the pair or the draft changes: the pair's description, and the knobs it suggests (γ,
    temperature, ...; its draft vocabulary only for its own draft; γ as followed here once measured)."""
    return gr.update(info=ctx.registry.pair(name).description), *ctx.suggested(name, draft).values()


def shown_default(ctx: AppContext, name: str, pair: str | None = None):
    """The value a knob's control shows until the user moves it: the pair's suggestion where
    models.yaml makes one (follow_pair sets it), else the knob's own default."""
    if name in PAIR_KNOBS:
        return ctx.suggested(pair)[name]
    return KNOBS[name].default


def follow_pair(ctx: AppContext, knobs: dict) -> None:
    """Wire the pair dropdown of settings_controls() to show the chosen pair's description and set
    the knobs it suggests when the user picks a pair or draft (`input`, not `change`: settings handed
    over whole, such as the Drafts tab's winner, keep their own γ and draft vocabulary)."""
    for decider in ("pair", "draft"):
        knobs[decider].input(
            lambda name, draft: pair_defaults(ctx, name, draft),
            [knobs["pair"], knobs["draft"]],
            [knobs["pair"], *(knobs[name] for name in PAIR_KNOBS)],
            api_visibility="private",
        )
