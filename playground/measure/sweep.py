"""The sweep: a grid of γ × drafter × temperature × draft settings over a few prompts, measured with
the bench's own code (warm-up, then baseline and speculative runs alternated, the median kept),
summarised per cell with the bench's summary, and written as CSV and JSON. The draft settings
(n-gram sizes, draft vocabulary, tree shape) use the benchmark's --sweep grammar, so a row of the
page and a run of the CLI name a draft the same way.

`make_plan` checks every field before anything loads; errors name the field as the page shows it.
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from playground.config import DRAFTER_LABELS, DRAFTERS, KNOBS, MAX_NEW_TOKENS, MODEL, TREE, RunConfig
from playground.measure.points import point_from_record

MAX_RUNS = 400  # cells × prompts: past this a CPU sweep takes a day
# The sweep's rows: each drafter as a chain, and the draft model growing a token tree. On a tree row
# γ is the tree's depth (levels drafted per call), the other tree knobs at the record's defaults.
TREE_ROW = TREE  # the speculation's own name
ROW_KINDS = [*DRAFTERS, TREE_ROW]
ROW_LABELS = {**DRAFTER_LABELS, TREE_ROW: "draft tree (γ = depth)"}
MAX_PER_CATEGORY = 20
SCHEMA = "playground.sweep/1"
# The draft knobs a page sweep may vary beside the drafter kind (the pair's draft stays loaded, so
# not its quantization: that is the benchmark's --sweep draft_quantization=...)
# (nor the tree's depth: on a tree row that is the γ column)
DRAFT_AXIS = [k.name for k in KNOBS.values()
              if k.sweep and k.group == "drafter" and k.name not in ("drafter", "tree_depth")]
COLUMNS = [
    "drafter",
    "draft",
    "temperature",
    "gamma",
    "prompts",
    "speedup",
    "alpha",
    "tokens_per_call",
    "c",
    "verify_cost",
    "formula_speedup",
    "baseline_tok_s",
    "speculative_tok_s",
    "identical",
]
HEADERS = [
    "drafter",
    "draft settings",
    "T",
    "γ",
    "prompts",
    "speedup ×",
    "α",
    "tokens / call",
    "c",
    "v",
    "formula ×",
    "baseline tok/s",
    "speculative tok/s",
    "identical",
]  # COLUMNS as the page shows them
LEGEND = (
    "speedup: median over the prompts of speculative ÷ autoregressive tokens/s. α: share of tested "
    "guesses kept. c: one draft step ÷ one plain target step. v: one verification pass ÷ one plain target "
    "step (the paper's formula assumes 1). formula: (1 − α^(γ+1)) / ((1 − α)(γc + v)) at the measured α, c and v. "
    "identical (greedy only): the speculative text equals the autoregressive one. Tree rows: γ is the tree's "
    "depth, α the chance that a level keeps one of its candidates, c one draft forward per level (all its "
    "nodes at once); the formula then reads a tree as a chain with that α."
)


@dataclass(frozen=True)
class SweepPrompt:
    label: str  # "Code" or "spec-bench coding #81"
    text: str


@dataclass(frozen=True)
class Plan:
    pair: str
    gammas: list[int]
    drafters: list[str]
    temperatures: list[float]
    prompts: list[SweepPrompt]
    max_new_tokens: int
    repeats: int
    seed: int
    draft_axis: dict  # knob -> values (DRAFT_AXIS), each combination a row of its own
    base: dict  # the pair's suggested draft knobs (its draft vocabulary), where the axis says nothing

    @property
    def drafts(self) -> list[dict]:
        keys = list(self.draft_axis)
        return [dict(zip(keys, values)) for values in itertools.product(*self.draft_axis.values())]

    @property
    def cells(self) -> list[tuple[str, float, int, dict]]:
        return list(itertools.product(self.drafters, self.temperatures, self.gammas, self.drafts))

    @property
    def total_runs(self) -> int:
        """Progress units: a warm-up per cell, then a baseline and a speculative run per prompt and repeat."""
        return len(self.cells) * (1 + 2 * self.repeats * len(self.prompts))


def parse_list(field: str, text, kind=int) -> list:
    """'1,2,4' or '1-4,8' (ranges for whole numbers) -> values; errors name the field."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{field}: give at least one value, e.g. {'1,2,4,8' if kind is int else '0,0.7'}")
    values = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part) if kind is int else None
        try:
            if match:
                low, high = int(match[1]), int(match[2])
                if high < low or high - low > 64:
                    raise ValueError
                values += list(range(low, high + 1))
            else:
                values.append(kind(part))
        except ValueError:
            what = "whole numbers or ranges like 1-8" if kind is int else "numbers"
            raise ValueError(f"{field}: expected {what} separated by commas, got {part!r}") from None
    return list(dict.fromkeys(values))


def parse_draft_axis(text) -> dict[str, list]:
    """'draft_vocab=0,65536 ngram_max=2,3' (the benchmark's --sweep grammar) -> knob -> values."""
    from playground.measure.grid import parse_sweep

    items = (text or "").split()
    for item in items:
        if item.partition("=")[0].strip().replace("-", "_") not in DRAFT_AXIS:
            raise ValueError(f"draft settings: expected KEY=V1,V2,... with KEY one of {', '.join(DRAFT_AXIS)}, "
                             f"got {item!r}")
    try:
        return parse_sweep(items)
    except ValueError as e:
        raise ValueError(f"draft settings: {e}") from None


def check_values(gammas: list[int], temperatures: list[float]) -> None:
    """The engine's own range checks (SpecConfig), re-raised with the page's field names."""
    from playground.engine.generate import SpecConfig

    for field, name, values in (("γ values", "gamma", gammas), ("temperatures", "temperature", temperatures)):
        for value in values:
            try:
                SpecConfig(**{name: value})
            except ValueError as e:
                raise ValueError(f"{field}: {e}") from None


def choose_prompts(examples: list[str], categories: list[str], per_category, builtin: dict[str, str]) -> list:
    """Built-in examples by label, plus the first `per_category` Spec-Bench prompts of each category."""
    from playground.measure.prompts import load_prompts
    from playground.app.shared.flow import whole

    chosen = [SweepPrompt(label, builtin[label]) for label in examples or [] if label in builtin]
    if categories:
        limit = whole("prompts per category", per_category, 1, MAX_PER_CATEGORY)
        try:
            bench = load_prompts(categories=categories, limit=limit)
        except ValueError as e:
            raise ValueError(f"Spec-Bench categories: {e}") from None
        chosen += [SweepPrompt(f"spec-bench {p.category} #{p.id}", p.text) for p in bench]
    if not chosen:
        raise ValueError("prompts: choose at least one example or Spec-Bench category")
    return chosen


def make_plan(
    pair: str,
    gammas_text,
    drafters,
    temperatures_text,
    examples,
    categories,
    per_category,
    max_new_tokens,
    repeats,
    seed,
    builtin: dict[str, str],
    draft_text: str = "",
    base: dict | None = None,
) -> Plan:
    from playground.app.shared.flow import whole

    draft_axis = parse_draft_axis(draft_text)
    gammas = parse_list("γ values", gammas_text, int)
    temperatures = parse_list("temperatures", temperatures_text, float)
    check_values(gammas, temperatures)
    if not drafters:
        raise ValueError("drafters: choose at least one")
    unknown = [d for d in drafters if d not in ROW_KINDS]
    if unknown:
        raise ValueError(
            f"drafters: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(ROW_KINDS)}"
        )
    prompts = choose_prompts(examples, categories, per_category, builtin)
    plan = Plan(
        pair,
        gammas,
        list(drafters),
        temperatures,
        prompts,
        whole("max new tokens", max_new_tokens, 1, MAX_NEW_TOKENS),
        whole("repeats", repeats, 1, 10),
        whole("seed", seed, 0, 2**31 - 1),
        draft_axis,
        {k: v for k, v in (base or {}).items() if k in DRAFT_AXIS},
    )
    for kind, temperature, gamma, draft in plan.cells:  # cross-field rules (n-gram max >= min), up front
        try:
            cell_settings(plan, kind, gamma, draft, temperature)
        except ValueError as e:
            raise ValueError(f"draft settings: {e}") from None
    runs = len(plan.cells) * len(prompts)
    if runs > MAX_RUNS:
        raise ValueError(
            f"grid: {len(plan.cells)} settings × {len(prompts)} prompts = {runs} measurements, "
            f"more than {MAX_RUNS}; use fewer values or prompts"
        )
    return plan


def run_sweep(pair, plan: Plan, report) -> list[dict]:
    """Measure every cell (in lockstep with the page); report("run", what, done, total) after each
    run and report("cell", row, done, total) after each cell. Returns the rows."""
    from playground.engine import factory
    from dataclasses import replace

    from playground.measure.machine import spare_a_core
    from playground.measure.runs import Setup, measure_prompt, warm_up
    from playground.engine.generate import context_problem
    from playground.models.text import encode_prompt

    encoded = [(p, encode_prompt(pair.tokenizer, p.text)) for p in plan.prompts]
    done, total, rows = 0, plan.total_runs, []
    with spare_a_core():  # as in the race: the page keeps a core, so drawing never stalls the models
        for drafter, temperature, gamma, draft in plan.cells:
            settings = cell_settings(plan, drafter, gamma, draft, temperature)
            setup = Setup.of(pair, settings)
            config = replace(factory.spec_config(settings), gamma=gamma)  # a tree row drafts γ levels deep
            fitting = [(p, ids) for p, ids in encoded if context_problem(setup.target, ids, config) is None]
            if not fitting:
                raise ValueError(
                    f"prompts: none fits the target's context with {plan.max_new_tokens} new tokens"
                )
            warm_up(setup, fitting[0][1], config, 1)
            done += 1
            name = ", ".join([drafter, *(f"{k} = {v}" for k, v in draft.items()), f"T = {temperature:g}", f"γ = {gamma}"])
            report("run", f"warm-up, {name}", done, total)
            records = []
            for prompt, ids in fitting:
                cell = f"{prompt.label} ({name})"

                def ran(method, _done, _total, cell=cell):
                    nonlocal done
                    done += 1
                    report("run", f"{method} on {cell}", done, total)

                record = measure_prompt(setup, ids, config, plan.repeats, ran)
                records.append({"prompt": prompt.label, "drafter": drafter, **record})
            done = max(done, cell_end(plan, len(rows) + 1))  # prompts too long for the context are skipped
            row = summarize_cell(plan.pair, drafter, temperature, gamma, records)
            row["draft"] = draft_label(draft)
            row["run"] = asdict(settings)
            rows.append(row)
            report("cell", row, done, total)
    return rows


def cell_settings(plan: Plan, kind: str, gamma: int, draft: dict | None = None,
                  temperature: float = 0.0) -> RunConfig:
    """The run configuration of one row: its kind at one γ (a tree row's γ is its depth, its drafted
    chain the draft model's), the pair's draft knobs, then the row's own draft settings, with the
    plan's seed and length."""
    knobs = {**plan.base, **(draft or {}), "temperature": temperature, "seed": plan.seed,
             "max_new_tokens": plan.max_new_tokens}
    if kind == TREE_ROW:
        return RunConfig(pair=plan.pair, drafter=MODEL, speculation=TREE, tree_depth=gamma, **knobs)
    return RunConfig(pair=plan.pair, drafter=kind, gamma=gamma, **knobs)


def draft_label(draft: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in draft.items())


def fastest(rows: list[dict]) -> dict | None:
    """The run configuration of the row with the most speculative tokens per second."""
    return max(rows, key=lambda r: r["speculative_tok_s"])["run"] if rows else None


def cell_end(plan: Plan, cells_done: int) -> int:
    return cells_done * (1 + 2 * plan.repeats * len(plan.prompts))


def summarize_cell(pair: str, drafter: str, temperature: float, gamma: int, records: list[dict]) -> dict:
    """One table row: the bench's summary of the cell's prompts (the CLI's numbers, the same code),
    and a theory point per prompt."""
    from playground.measure.summary import summarize_records

    summary = summarize_records(records)
    points = [
        point_from_record(
            r,
            pair=pair,
            drafter=drafter,
            temperature=temperature,
            gamma=gamma,
            source="sweep",
            prompt=r["prompt"],
        )
        for r in records
    ]
    return {
        "drafter": drafter,
        "temperature": temperature,
        "gamma": gamma,
        "prompts": len(records),
        "speedup": summary["speedup"],
        "alpha": summary["alpha"],
        "tokens_per_call": summary["mean_accepted_tokens"],
        "c": summary["c"],
        "verify_cost": summary["verify_cost"],
        "formula_speedup": summary["predicted_speedup"],
        "baseline_tok_s": summary["baseline_tok_s"],
        "speculative_tok_s": summary["speculative_tok_s"],
        "identical": summary["identical"],
        "points": points,
        "records": records,
    }


def table(rows: list[dict]) -> list[list]:
    """The rows as the page's table shows them (rounded)."""

    def cell(value):
        return round(value, 3) if isinstance(value, float) else value

    return [[cell(r[k]) for k in COLUMNS] for r in rows]


def write_files(plan: Plan, rows: list[dict], directory: str | None = None) -> tuple[str, str]:
    """CSV (one row per cell) and JSON (plan, rows, per-prompt records), written atomically into a fresh
    temp directory (one per sweep, so two sessions never overwrite each other's files)."""
    import csv
    import io

    from playground.measure.report import atomic_write, clean

    folder = Path(directory or tempfile.mkdtemp(prefix="playground-sweep-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    csv_path, json_path = folder / f"sweep-{stamp}.csv", folder / f"sweep-{stamp}.json"
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    writer.writerows([[r[k] for k in COLUMNS] for r in rows])
    atomic_write(csv_path, buffer.getvalue())
    report = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "plan": {**asdict(plan), "prompts": [asdict(p) for p in plan.prompts]},
        "columns": {
            "c": "one draft step ÷ one plain target step",
            "verify_cost": "one verification pass ÷ one plain target step",
        },
        "rows": [{k: r[k] for k in COLUMNS} | {"run": r["run"], "records": r["records"]} for r in rows],
    }
    atomic_write(json_path, json.dumps(clean(report), indent=2) + "\n")
    return str(csv_path), str(json_path)
