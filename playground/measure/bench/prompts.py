"""Benchmark prompts: Spec-Bench's question.jsonl or a plain JSONL of {"id", "category", "prompt"}.

Both formats may be mixed line by line. Spec-Bench questions are multi-turn; like Spec-Bench's own
single-turn runs we use the first turn. `limit` is per category, so `--limit 2` is a balanced
subset (2 of each category) rather than the first N lines, which would all be one category.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROMPTS = Path(__file__).parent / "data" / "spec_bench_questions.jsonl"
EXAMPLE = "example"  # the category of an app's built-in example among a sweep's prompts


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str


def load_prompts(path=None, categories=None, limit: int | None = None) -> list[Prompt]:
    """Prompts from `path` (the bundled Spec-Bench file by default), in file order.

    categories: keep only these (a ValueError lists the file's categories if one is unknown).
    limit: at most this many prompts per category.
    """
    return select(read_jsonl(Path(path) if path else DEFAULT_PROMPTS), categories, limit)


def select(prompts: list[Prompt], categories=None, limit: int | None = None) -> list[Prompt]:
    if categories:
        prompts = filter_categories(prompts, categories)
    if limit is not None:
        prompts = first_per_category(prompts, limit)
    return prompts


def read_jsonl(path: Path) -> list[Prompt]:
    if not path.is_file():
        raise ValueError(f"prompt file {str(path)!r} does not exist")
    prompts = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                prompts.append(parse_line(line, f"{path}:{number}"))
    if not prompts:
        raise ValueError(f"prompt file {str(path)!r} holds no prompts")
    return prompts


def parse_line(line: str, where: str) -> Prompt:
    """One JSON line in either format; errors say which line and what was expected."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    if "turns" in row:  # Spec-Bench / MT-bench question format
        turns = row["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise ValueError(f"{where}: 'turns' must be a non-empty list of strings")
        ident, text = row.get("question_id"), turns[0]
    elif "prompt" in row:
        ident, text = row.get("id"), row["prompt"]
    else:
        raise ValueError(f"{where}: expected Spec-Bench {{'question_id', 'category', 'turns'}} "
                         f"or {{'id', 'category', 'prompt'}}, got keys {sorted(row)}")
    if ident is None or not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: needs an id and non-empty prompt text")
    return Prompt(id=str(ident), category=str(row.get("category", "uncategorized")), text=text)


def filter_categories(prompts: list[Prompt], categories) -> list[Prompt]:
    wanted = list(dict.fromkeys(categories))
    available = list(dict.fromkeys(p.category for p in prompts))
    unknown = [c for c in wanted if c not in available]
    if unknown:
        raise ValueError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; "
                         f"this file has: {', '.join(available)}")
    return [p for p in prompts if p.category in wanted]


def first_per_category(prompts: list[Prompt], limit: int) -> list[Prompt]:
    seen: dict[str, int] = {}
    kept = []
    for p in prompts:
        seen[p.category] = seen.get(p.category, 0) + 1
        if seen[p.category] <= limit:
            kept.append(p)
    return kept


def categories_of(prompts: list[Prompt]) -> list[str]:
    """Categories in order of first appearance."""
    return list(dict.fromkeys(p.category for p in prompts))


def prompt_name(ident: str, category: str) -> str:
    """How progress and the app name a prompt: an example by its label, a file's by category and id."""
    return ident if category == EXAMPLE else f"{category} #{ident}"
