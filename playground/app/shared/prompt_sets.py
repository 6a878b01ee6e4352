"""The prompts a measuring tab (Sweep, Drafts) runs on: the Race tab's examples by label, plus the
first prompts of chosen Spec-Bench categories; a bad choice names the page's field."""

from __future__ import annotations

from playground.measure.bench import sweep
from playground.measure.bench.prompts import EXAMPLE, Prompt, load_prompts
from playground.app.shared.examples import RACE
from playground.app.shared.flow import whole

MAX_PER_CATEGORY = 20
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
