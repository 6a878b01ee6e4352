"""The prompts a measuring tab (Sweep, Drafts) runs on: the Race tab's examples by label, plus the
first prompts of chosen Spec-Bench categories; a bad choice names the page's field."""

from __future__ import annotations

from playground.measure.bench import sweep
from playground.measure.bench.prompts import EXAMPLE, Prompt, load_prompts
from playground.app.shared.examples import RACE
from playground.app.shared.flow import whole

MAX_PER_CATEGORY = 20
MAX_REPEATS = 10
BUILTIN = {e[0]: e[1] for e in RACE}  # the Race tab's examples, by label


def choose_prompts(examples, categories, per_category, builtin: dict[str, str] = BUILTIN,
                   required: bool = True) -> list[Prompt]:
    """Built-in examples by label, plus the first `per_category` Spec-Bench prompts of each category;
    `required`: none chosen is an error (a tab with prompts of its own passes False)."""
    chosen = [Prompt(label, EXAMPLE, builtin[label]) for label in examples or [] if label in builtin]
    if categories:
        limit = whole("prompts per category", per_category, 1, MAX_PER_CATEGORY)
        try:
            chosen += load_prompts(categories=categories, limit=limit)
        except ValueError as e:
            raise sweep.SettingError("Spec-Bench categories", str(e)) from None
    if not chosen and required:
        raise sweep.SettingError("prompts", "choose at least one example or Spec-Bench category")
    return chosen


def prompt_controls(prefix: str) -> tuple:
    """The example prompts, the Spec-Bench categories and how many prompts of each, as a measuring
    tab lays them out (elem_ids under `prefix`): what choose_prompts takes."""
    import gradio as gr

    from playground.measure.bench.prompts import categories_of, load_prompts

    examples = gr.CheckboxGroup(list(BUILTIN), value=[next(iter(BUILTIN))], label="example prompts",
                                elem_id=f"{prefix}-examples")
    with gr.Row():
        categories = gr.CheckboxGroup(categories_of(load_prompts()), label="Spec-Bench categories",
                                      elem_id=f"{prefix}-categories", scale=3)
        per_category = gr.Number(1, minimum=1, maximum=MAX_PER_CATEGORY, precision=0, label="prompts per category",
                                 elem_id=f"{prefix}-per-category", scale=1)
    return examples, categories, per_category


def run_controls(prefix: str, tokens: int) -> tuple:
    """The length of each run and how many times each is timed (the median kept)."""
    import gradio as gr

    from playground.config import KNOBS

    length = KNOBS["max_new_tokens"]
    return (gr.Number(tokens, minimum=length.low, maximum=length.high, precision=0, label="max new tokens",
                      elem_id=f"{prefix}-tokens"),
            gr.Number(1, minimum=1, maximum=MAX_REPEATS, precision=0, label="repeats (median kept)",
                      elem_id=f"{prefix}-repeats"))
