"""The Drafts tab's fields as the board's plan (measure/bench/board/lineup.py), every value checked before
anything loads; an error names the field as the page shows it, and its allowed range."""

from __future__ import annotations

from dataclasses import dataclass

from playground.measure.bench import sweep
from playground.measure.bench.board import lineup
from playground.measure.bench.prompts import Prompt
from playground.app.shared.flow import read_settings, whole
from playground.app.shared.form import Form
from playground.app.shared.prompt_sets import BUILTIN, MAX_REPEATS, choose_prompts

MAX_RUNS = 200  # entries × prompts: past this the board takes most of a day on a CPU
MAX_BUDGET_MIN = 24 * 60
OWN = "your prompts"  # the category of a prompt typed into the page


@dataclass(frozen=True)
class BoardForm(Form):
    """The page's fields, as the page sends them; field order is the API's parameter order."""

    pair: str | None = None
    drafters: tuple = (lineup.ALL,)
    examples: tuple = ()
    categories: tuple = ()
    per_category: int = 1
    own: str = ""  # the user's own prompts, one per line
    tokens: int = 48  # max new tokens per run
    repeats: int = 1
    temperature: float = 0.0
    seed: int = 0
    budget: float = 30.0  # minutes the board may take at most


@dataclass(frozen=True)
class BoardPlan:
    """What a board run needs, checked: the pair's spec, the entries in measuring order, the probe's plan."""

    spec: object
    entries: list[lineup.Entry]
    plan: sweep.Plan
    budget_s: float


def planned(registry, form: BoardForm) -> BoardPlan:
    """The form as the board's plan; ValueError names the page's field."""
    try:
        spec = registry.pair(form.pair)
    except ValueError as error:
        raise ValueError(f"pair: {error}") from None
    try:
        prompts = own_prompts(form.own) + choose_prompts(form.examples, form.categories, form.per_category,
                                                         BUILTIN, required=not form.own.strip())
        base = read_settings({"pair": spec.name, **spec.suggested(), "seed": form.seed, "max_new_tokens": form.tokens,
                              "temperature": form.temperature})
        names = lineup.names_of(list(form.drafters or ()), registry, spec)
        entries = lineup.entries(names, base, registry, spec)
        repeats = whole("repeats", form.repeats, 1, MAX_REPEATS)
        if len(entries) * len(prompts) > MAX_RUNS:
            raise sweep.SettingError("prompts", f"{len(entries)} drafters × {len(prompts)} prompts = "
                                                f"{len(entries) * len(prompts)} measurements, more than {MAX_RUNS}; "
                                                "choose fewer drafters or prompts")
        plan = lineup.plan_of(entries, base, prompts, repeats=repeats, command="the app's Drafts tab")
    except sweep.SettingError as error:
        field = "drafters" if error.flag == "--drafters" else error.flag
        raise ValueError(f"{field}: {error}") from None
    budget = form.budget
    if not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET_MIN:
        raise ValueError(f"budget (minutes): expected a number in (0, {MAX_BUDGET_MIN}], got {budget!r}")
    return BoardPlan(spec, entries, plan, budget * 60)


def own_prompts(text: str) -> list[Prompt]:
    """One prompt per non-empty line of the page's box."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return [Prompt(f"own-{i + 1}", OWN, line) for i, line in enumerate(lines)]
