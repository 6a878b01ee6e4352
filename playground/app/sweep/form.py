"""The Sweep tab's fields as a sweep plan (measure/bench/sweep.py), every value checked before anything
loads; an error names the field as the page shows it, and its allowed range.

The page writes the benchmark's --sweep grammar in pieces: γ values and temperatures are value lists
(`1,2,4` or `1-8`), the drafters a checkbox, the draft settings `draft_vocab=0,65536 ngram_max=2,3`.
Row kinds: each drafter as a chain, and `tree`, the draft model growing a token tree γ levels deep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from playground.config import DRAFT_MODEL_DRAFTERS, DRAFTER_LABELS, DRAFTERS, KNOBS, MODEL, TREE
from playground.measure.bench import sweep
from playground.app.shared.flow import read_settings, whole
from playground.app.shared.form import Form
from playground.app.shared.prompt_sets import BUILTIN, MAX_REPEATS, choose_prompts

MAX_RUNS = 400  # cells × prompts: past this a CPU sweep takes a day
ROW_KINDS = [*DRAFTERS, TREE]
ROW_LABELS = {**DRAFTER_LABELS, TREE: "draft tree (γ = depth)"}
# The draft knobs a page sweep may vary beside the row kind (the pair's draft stays loaded, so not
# its quantization: that is the benchmark's --sweep draft_quantization=...; nor the tree's depth: on
# a tree row that is the γ column)
DRAFT_AXIS = [k.name for k in KNOBS.values()
              if k.sweep and k.group == "drafter" and k.name not in ("drafter", "tree_depth")]


@dataclass(frozen=True)
class SweepForm(Form):
    """The page's fields, as the page sends them; field order is the API's parameter order."""

    pair: str | None = None
    gammas: str = "1,2,4"
    drafters: tuple = (MODEL,)
    temperatures: str = "0"
    examples: tuple = ()
    categories: tuple = ()
    per_category: int = 1
    tokens: int = 32  # max new tokens per run
    repeats: int = 1
    seed: int = 0
    drafts: str = ""
    draft_models: tuple = ()  # models.yaml names, each drafting in rows of its own ("": the pair's own draft)


def planned(registry, form: SweepForm) -> sweep.Plan:
    """The form as a plan over the chosen pair (its name resolved, None: the registry's default) and
    the draft knobs it suggests; ValueError names the page's field."""
    spec = registry.pair(form.pair)
    unknown = [name for name in form.draft_models or () if name and name not in registry.models]
    if unknown:
        raise ValueError(f"draft models: unknown model {', '.join(map(repr, unknown))}; choose from models.yaml's "
                         f"models: {', '.join(registry.models)}")
    return plan_of(replace(form, pair=spec.name), spec.suggested())


def plan_of(form: SweepForm, suggested: dict | None = None, builtin: dict[str, str] = BUILTIN) -> sweep.Plan:
    """The form as a plan: row kinds × temperatures × γ values × draft settings over the base run
    (the pair, its suggested draft knobs where the draft settings say nothing, seed and length).
    ValueError names the page's field."""
    try:
        drafts = sweep.parse_axes((form.drafts or "").split(), allowed=DRAFT_AXIS, flag="draft settings")
        models = list(dict.fromkeys(form.draft_models or ()))
        # the draft first: its cells run one after another, so each draft model loads once
        axes = {**({"draft": models} if models and models != [""] else {}),
                "drafter": row_kinds(form.drafters), "temperature": sweep.axis("temperature", form.temperatures,
                                                                               "temperatures"),
                "gamma": sweep.axis("gamma", form.gammas, "γ values"), **drafts}
        prompts = choose_prompts(form.examples, form.categories, form.per_category, builtin)
        base = read_settings({"pair": form.pair, "seed": form.seed, "max_new_tokens": form.tokens,
                              **{k: v for k, v in (suggested or {}).items() if k in DRAFT_AXIS}})
        repeats = whole("repeats", form.repeats, 1, MAX_REPEATS)
        # the one rule between a row's values the fields above cannot check alone: n-gram max >= min
        plan = sweep.make_plan(sweep.Grid(base, axes), prompts, max_runs=MAX_RUNS, flag="draft settings",
                               repeats=repeats, command="the app's Sweep tab")
        return replace(plan, cells=[c for c in plan.cells if drafts_with_model(c) or c.draft == plan.cells[0].draft])
    except sweep.SettingError as error:
        raise ValueError(f"{error.flag}: {error}") from None


def drafts_with_model(cell) -> bool:
    """Does the cell's drafter run the draft model (a drafter that does not is one row, not one per draft)?"""
    return cell.drafter in DRAFT_MODEL_DRAFTERS


def row_kinds(drafters) -> list[str]:
    if not drafters:
        raise sweep.SettingError("drafters", "choose at least one")
    unknown = [d for d in drafters if d not in ROW_KINDS]
    if unknown:
        raise sweep.SettingError("drafters", f"unknown {', '.join(map(repr, unknown))}; "
                                             f"choose from {', '.join(ROW_KINDS)}")
    return list(drafters)
