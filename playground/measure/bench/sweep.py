"""The sweep: a grid of run configurations (cells) over a set of prompts, measured with the
benchmark's code (warm-up, then the baseline and the speculative run alternated, the median kept),
summarised per cell (summary.py) and assembled into one report (schema playground.bench/1), so
a sweep from the command line and one from the page give the same JSON.

The grammar, as `--sweep` and the page's fields write it: `gamma=1,2,4 temperature=0,0.7
draft_vocab=0,65536`, each value list `1,2,4` or, for whole numbers, ranges `1-8`. Every value is
checked against its knob's range when parsed, and every cell by RunConfig, before anything loads.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from playground.config import KNOBS, MODEL, TREE, RunConfig, check_value, parse_text
from playground.measure.bench.prompts import Prompt, prompt_name
from playground.measure.bench.report import SCHEMA, describe_pair, settings_of

SWEEPABLE = [k.name for k in KNOBS.values() if k.sweep]  # the knobs a grid may vary, in field order
MAX_RANGE = 64  # a range like 1-8 spans at most this many steps (past it, a typo: 1-500)


class SettingError(ValueError):
    """A bad value, with where it came from: a command-line flag or a field of the page."""

    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag


# -- the grammar -------------------------------------------------------------------------------------


def parse_values(key: str, text) -> list:
    """'1,2,4' or '1-4,8' (ranges for whole-number knobs) -> the knob's values, each in its range,
    duplicates dropped; ValueError names the knob and what it takes."""
    k = KNOBS[key]
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"give at least one value, e.g. {'1,2,4,8' if k.kind is int else '0,0.7'}")
    values = []
    for part in (p.strip() for p in text.split(",")):
        span = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part) if k.kind is int else None
        if span:
            low, high = int(span[1]), int(span[2])
            if not 0 <= high - low <= MAX_RANGE:
                raise ValueError(f"{key}: a range runs from low to high over at most {MAX_RANGE} steps, "
                                 f"got {part!r}")
            values += range(low, high + 1)
        else:
            try:
                values.append(parse_text(k, part))
            except ValueError:
                ranges = " or ranges like 1-8" if k.kind is int else ""
                raise ValueError(f"{key} takes {'integers' if k.kind is int else 'numbers'}{ranges}, "
                                 f"separated by commas, got {part!r}") from None
    for value in values:
        if k.name != "drafter" or value != TREE:  # a tree row: the draft model's tree (cell_of)
            check_value(k, value)
    return list(dict.fromkeys(values))


def parse_axes(items, allowed=SWEEPABLE, flag: str = "--sweep") -> dict[str, list]:
    """["gamma=1,2", "temperature=0,0.7"] -> {"gamma": [1, 2], "temperature": [0.0, 0.7]};
    SettingError names `flag` (the CLI's --sweep, or the page's field)."""
    axes: dict[str, list] = {}
    for item in items or []:
        key, _, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in allowed or not values:
            raise SettingError(flag, f"expected KEY=V1,V2,... with KEY one of {', '.join(allowed)}, got {item!r}")
        if key in axes:
            raise SettingError(flag, f"{key} is swept twice")
        axes[key] = axis(key, values, flag)
    return axes


def axis(key: str, text, flag: str) -> list:
    """One axis from its value list; SettingError names `flag`."""
    try:
        return parse_values(key, text)
    except ValueError as error:
        raise SettingError(flag, str(error)) from None


def grammar(axes: dict[str, list]) -> list[str]:
    """The axes as --sweep writes them: what reproduces a page's sweep from the command line."""
    return [f"{key}={','.join(map(str, values))}" for key, values in axes.items()]


# -- the plan ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """What a sweep varies: each combination of the axes' values over the base run is a cell."""

    base: RunConfig
    axes: dict[str, list] = field(default_factory=dict)  # knob -> values, in the order cells vary


@dataclass(frozen=True)
class Plan:
    """Everything checked before a model is loaded."""

    grid: Grid
    cells: list[RunConfig]  # one per point of the grid, in product order of the axes
    prompts: list[Prompt]
    repeats: int = 1  # timed runs per prompt and method; the median is kept
    warmup: int = 1  # untimed warm-up rounds per cell
    tree: bool = False  # also time a token tree beside the chain (the benchmark's --tree)
    reference: bool = False  # also time transformers' generate() and assisted generation
    llamacpp: bool = False  # also time llama.cpp's own plain decoding of the target's GGUF file
    ortgenai: bool = False  # also time onnxruntime-genai's own loop, plain and speculative
    openvino: bool = False  # also time OpenVINO GenAI's LLMPipeline, plain and (a readable draft) speculative
    command: str = ""  # how the report says it was made

    @property
    def pair(self) -> str:
        return self.grid.base.pair

    @property
    def methods(self) -> int:
        return 2 + self.tree + 2 * self.reference + self.llamacpp + 2 * self.ortgenai + 2 * self.openvino

    @property
    def runs_per_cell(self) -> int:
        """Progress units of one cell: its warm-up, then each method per prompt and repeat."""
        return (1 if self.warmup else 0) + self.methods * self.repeats * len(self.prompts)

    @property
    def total_runs(self) -> int:
        return len(self.cells) * self.runs_per_cell


def make_plan(grid: Grid, prompts: list[Prompt], max_runs: int | None = None, flag: str = "--sweep",
              **options) -> Plan:
    """Every cell of the grid checked by RunConfig (cross-field rules such as n-gram max >= min);
    `max_runs` bounds cells × prompts. SettingError names `flag` where a swept value breaks a rule,
    or the flag of the base value."""
    if not prompts:
        raise SettingError("prompts", "choose at least one prompt")
    cells = expand(grid, flag)
    if max_runs is not None and len(cells) * len(prompts) > max_runs:
        raise SettingError("grid", f"{len(cells)} settings × {len(prompts)} prompts = "
                                   f"{len(cells) * len(prompts)} measurements, more than {max_runs}; "
                                   "use fewer values or prompts")
    return Plan(grid, cells, list(prompts), **options)


def expand(grid: Grid, flag: str = "--sweep") -> list[RunConfig]:
    """Every combination of the swept values over the base run, each validated by RunConfig."""
    keys = list(grid.axes)
    return [cell_of(grid.base, dict(zip(keys, values)), flag)
            for values in itertools.product(*(grid.axes[k] for k in keys))]


def cell_of(base: RunConfig, swept: dict, flag: str = "--sweep") -> RunConfig:
    """The base run with the swept values. A `drafter=tree` cell is the draft model growing a token
    tree γ levels deep (the page's tree row), so γ stays the axis that a curve is drawn against."""
    if swept.get("drafter") == TREE:
        gamma = swept.get("gamma", base.gamma)
        swept = {**swept, "drafter": MODEL, "speculation": TREE, "tree_depth": gamma, "gamma": gamma}
    try:
        return replace(base, **swept)
    except ValueError as error:  # on the command line, a rule a base value breaks names its flag
        name = str(error).split(" ", 1)[0]
        by_flag = flag == "--sweep" and name in KNOBS and name not in swept
        raise SettingError(KNOBS[name].flag if by_flag else flag, str(error)) from None


def kind_of(cell: RunConfig) -> str:
    """A cell's row kind: its drafter drafting a chain, or `tree` (the draft model's token tree)."""
    return TREE if cell.speculation == TREE else cell.drafter


def gamma_of(cell: RunConfig) -> int:
    """The γ a curve draws a cell at: the drafted chain's length, or a tree's depth."""
    return cell.tree_depth if cell.speculation == TREE else cell.gamma


# -- the runner --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """Where a sweep stands: `done` of `total` runs. `record` is set when a prompt is measured,
    `run` (the report's entry) when a cell is, with its `cell`."""

    done: int
    total: int
    what: str
    cell: RunConfig | None = None
    record: dict | None = None
    run: dict | None = None


PairOf = Callable[[RunConfig], object]  # a cell -> its loaded pair (models.loading.LoadedPair)


Report = Callable[[Progress], None]


def measure(plan: Plan, pair_of: PairOf, progress: Report, stopped: Callable[[], bool] | None = None,
            done: int = 0) -> list[dict]:
    """Measure the cells one at a time, each on the pair `pair_of` gives it (a cell with another
    draft quantization gets another draft; nothing here holds a pair past its cell). `progress`
    hears of every run as it ends, so a page can stop the sweep between two runs; `stopped`, asked
    after every engine step, ends it within one step (runs.Interrupted). `done`: runs counted
    before this call (a second round's progress goes on from the first's). Returns the report's
    runs, one per cell, each naming the runner its target ran on."""
    from playground.engine import factory
    from playground.engine.generate import context_problem
    from playground.engine.runners import compile_failures, compile_seconds, resolve
    from playground.engine.runners.choice import bucket_of
    from playground.engine.runners.warmup import choose
    from playground.measure.bench.machine import peak_memory, reset_peak_memory
    from playground.measure.bench.runs import Setup, measure_prompt, warm_up
    from playground.measure.bench.summary import by_category, summarize_records
    from playground.models.text import encode_prompt

    encoded, start, runs = None, done, []
    for index, cell in enumerate(plan.cells):
        pair = pair_of(cell)
        encoded = encoded or [(p, encode_prompt(pair.tokenizer, p.text)) for p in plan.prompts]
        setup = Setup.of(pair, cell, tree=plan.tree, reference=plan.reference, llamacpp=plan.llamacpp,
                         ortgenai=plan.ortgenai, openvino=plan.openvino)
        setup.stopped = stopped
        config, name = factory.spec_config(cell), cell_name(plan, cell)
        reasons = [context_problem(setup.target, ids, config) for _, ids in encoded]
        fitting = [item for item, reason in zip(encoded, reasons) if reason is None]
        reset_peak_memory(setup.target.device)
        compiled_before = compile_seconds(setup.target, setup.draft)
        built = 0.0
        # auto's choices as the page's warm-up makes them (onnxruntime's builds, eager against compiled on a
        # GPU), before any timing and for each context bucket the prompts' runs step in: the benchmark
        # measures what the app runs
        contexts = sorted({bucket_of(len(ids) + cell.max_new_tokens) for _, ids in fitting}) or [None]
        for context in contexts:
            for event in choose(setup.target, setup.draft, cell, context=context):
                built += getattr(event, "seconds", None) or 0.0
                progress(Progress(done, plan.total_runs, build_text(event, name), cell))
        if fitting and plan.warmup:
            warm_up(setup, fitting[0][1], config, plan.warmup)
            done += 1
            progress(Progress(done, plan.total_runs, f"warm-up, {name}", cell))
        records = []
        for prompt, ids in fitting:
            def ran(method: str, *_, where=f"{prompt_name(prompt.id, prompt.category)} ({name})") -> None:
                nonlocal done
                done += 1
                progress(Progress(done, plan.total_runs, f"{method} on {where}", cell))

            records.append({"id": prompt.id, "category": prompt.category,
                            **measure_prompt(setup, ids, config, plan.repeats, ran)})
            progress(Progress(done, plan.total_runs, f"{prompt_name(prompt.id, prompt.category)} ({name})",
                              cell, record=records[-1]))
        done = start + (index + 1) * plan.runs_per_cell  # prompts too long for the context are skipped
        # compiling (the warm-up meets each shape first) is kept out of the medians, and shown here
        compiled = compile_seconds(setup.target, setup.draft) - compiled_before
        failed = compile_failures(setup.target, setup.draft)
        runs.append({"settings": settings_of(cell),
                     "runner": resolve(cell.runner, setup.target.device, cell.speculation == TREE, setup.target,
                                       None, contexts[0]),  # the shortest bucket's, where the prompts span several
                     "summary": {**summarize_records(records), "peak_memory": peak_memory(setup.target.device),
                                 **({"compile_s": round(compiled, 2)} if compiled > 0 else {}),
                                 **({"compile_failed": failed} if failed else {}),
                                 **({"build_s": round(built, 1)} if built > 0 else {})},
                     "categories": by_category(records), "prompts": records,
                     "skipped": [{"id": p.id, "category": p.category, "reason": reason}
                                 for (p, _), reason in zip(encoded, reasons) if reason is not None],
                     "draft": describe_pair(pair)["draft"]})
        del pair, setup
        progress(Progress(done, plan.total_runs, name, cell, run=runs[-1]))
    return runs


def build_text(event, name: str) -> str:
    """A build, auto's runner choice or the draft's head choice (runners/warmup.Building, Choosing), as
    the progress bar says it."""
    from playground.engine.runners.warmup import HEAD  # loaded already: it made the event

    if getattr(event, "what", None) == HEAD:
        if not event.done:
            return f"timing the draft's plain step with its head cut and whole, {name}"
        kept = event.choice["head"]
        return f"{head_text(event.choice)}: the {kept} head drafts (kept for this machine), {name}"
    if hasattr(event, "choice"):
        if not event.done:
            return f"timing the {event.model}'s plain step on {' and '.join(event.candidates)} for auto, {name}"
        from playground.engine.runners.auto import choice_text

        return f"auto: the {event.model} on {choice_text(event.choice)}, {name}"
    if getattr(event, "same_as", None):
        return f"ONNX build found for the {event.model}: same bytes as {event.same_as}, {name}"
    return f"{'built' if event.done else 'building'} the {event.model}'s ONNX model, {name}"


def head_text(choice: dict) -> str:
    """A draft's head choice (runners/auto.record_head) in a few words, the head kept first:
    "draft head on onnxruntime: full 151,936 rows, 9.8 ms vs cut 65,536 rows, 13.9 ms"."""
    runners = choice["runners"]
    heads = sorted(choice["step_ms"], key=lambda head: head != choice["head"])
    same = len(set(runners.values())) == 1  # else each head says where it ran
    parts = [f"{head} {choice['rows'][head]:,} rows{'' if same else ' on ' + runners[head]}, "
             f"{choice['step_ms'][head]:.1f} ms" for head in heads]
    return f"draft head{' on ' + runners[heads[0]] if same else ''}: {' vs '.join(parts)}"


def cell_name(plan: Plan, cell: RunConfig) -> str:
    """A cell's short name: its kind, the swept settings, T and γ."""
    shown = [f"{k} = {getattr(cell, k)}" for k in plan.grid.axes if k not in ("drafter", "gamma", "temperature")]
    return ", ".join([kind_of(cell), *shown, f"T = {cell.temperature:g}", f"γ = {gamma_of(cell)}"])


def run(plan: Plan, pair_of: PairOf, config: dict, progress: Report = lambda step: None,
        runs_of: Callable[..., list[dict]] | None = None) -> dict:
    """The whole sweep as one report (report.py's schema): the machine it ran on, the models, and a
    run per cell. `progress` sees every step; the CPU other processes took meanwhile is recorded.
    runs_of(plan, pair_of, progress): how the cells are measured (default: measure(); the drafts
    board's two rounds are another)."""
    from playground.measure.bench.machine import cpu_clock, environment, load_average, others_cpu_share, peak_memory

    first = pair_of(plan.cells[0])
    device, models = first.target.device, describe_pair(first)
    del first  # held by whoever loaded it; a cell with another draft may free it
    facts, started, clock_start = environment(device), time.strftime("%Y-%m-%dT%H:%M:%S%z"), cpu_clock()
    runs = (runs_of or measure)(plan, pair_of, progress)
    facts["others_cpu_share"] = others_cpu_share(clock_start, cpu_clock(), facts["cpu_cores_usable"] or 1)
    return {"schema": SCHEMA, "created": started, "command": plan.command, "config": config, "models": models,
            "environment": {**facts, "load_average_at_end": load_average()}, "memory": peak_memory(device),
            "runs": runs}
