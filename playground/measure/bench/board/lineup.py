"""The drafts board: every way of drafting for one target, on the same prompts, measured by the
one sweep (sweep.measure) and shown side by side (board_table.py). A preset of the sweep, not a
second benchmark: its report is the benchmark's own, with each run naming its board entry.

Entries, as `--drafters` and the page write them:
  model              the pair's draft model, with the draft vocabulary the pair suggests
  model:NAME         any model of models.yaml drafting over its whole vocabulary (NAME the pair's
                     own draft: its full vocabulary; another tokenizer: drafted across tokenizers)
  prompt_lookup, suffix, recycling, self, hybrid   the drafters with no second model, or a view
  tree, suffix-tree, recycling-tree, hybrid-tree, self-tree   each drafter's token tree
  model@Q, model:NAME@Q                             a draft model in another quantization Q (`all` adds the
                                                    pair's draft in each of WORTH_TRYING's on this device)

Each entry at its best γ for this machine, in two rounds. The probe drafts PROBE_GAMMA tokens (a
tree PROBE_GAMMA levels). Greedy, a shorter chain is the longer one's prefix, so the probe's
per-position counts say what every shorter chain would have kept; with the entry's c and the
target's v(k) measured through the same runner, the formula names the best γ (best_gamma). The
second round measures each chain whose best γ is shorter at that γ, and the board shows each
entry's last measurement. Trees stay at the probe's depth (their width is the runner's budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from playground.config import AUTO_QUANTIZATION, CHAIN, DRAFTERS, MODEL, MODEL_QUANTIZATIONS, TREE, TREE_DRAFTERS, \
    RunConfig
from playground.measure.bench.sweep import Grid, Plan, Progress, SettingError, measure

PROBE_GAMMA = 4  # the probe's γ: the best γ is chosen among 1..PROBE_GAMMA
ALL = "all"
TREE_SUFFIX = "-tree"
MIN_SECONDS_PER_RUN = 2.0  # a run's floor in the estimate: loading its inputs, the first call
QUANTIZED = "@"
# A draft's quantizations worth trying beside its own, per device. On a CPU int8 (PyTorch's kernels)
# keeps more of bf16's acceptance than int4 at a higher step cost, so which pays is the board's
# question; bf16 costs several times int4's step there (Table 4). On a GPU a small draft's step is
# launch-bound, so full precision costs little more than nf4 and keeps every token it would propose.
WORTH_TRYING = {"cpu": ("int8-cpu",), "cuda": ("none", "nf4")}


@dataclass(frozen=True)
class Entry:
    """One way of drafting on the board: its name (as --drafters writes it) and its run."""

    name: str
    cell: RunConfig


# -- which entries -----------------------------------------------------------------------------------


def draft_models(registry, spec) -> list[str]:
    """The models that can draft for the pair's target here: not the target, not a model some pair
    serves as its target (too large to draft), random weights only for a random-weight target, and
    loadable without the hub (a hub-only model is asked for by name, `model:NAME`)."""
    target = registry.model(spec.target)
    targets = {p.target for p in registry.pairs.values()}
    return [name for name, m in registry.models.items()
            if name != spec.target and name not in targets and m.random_weights == target.random_weights
            and (name == spec.draft or not m.needs_hub)]


def other_quantizations(registry, spec) -> list[str]:
    """The pair's draft's quantizations worth trying beside its own on the device it loads on."""
    from playground.models.loading import resolve_device  # torch: not at import

    draft = registry.model(spec.draft)
    device = resolve_device(draft.device, draft.name)
    own = AUTO_QUANTIZATION[device] if draft.quantization == "auto" else draft.quantization
    return [q for q in WORTH_TRYING.get(device, ()) if q != own]


def available(registry, spec) -> list[str]:
    """What `all` means for this pair: every entry that can draft for its target here."""
    models = [f"{MODEL}:{name}" for name in draft_models(registry, spec)
              if name != spec.draft or spec.draft_vocab]  # the pair's own draft again: its full vocabulary
    quantized = [f"{MODEL}{QUANTIZED}{q}" for q in other_quantizations(registry, spec)]
    return [MODEL, *quantized, *models, *(d for d in DRAFTERS if d != MODEL), TREE,
            *(f"{d}{TREE_SUFFIX}" for d in TREE_DRAFTERS if d != MODEL)]


def names_of(text, registry, spec) -> list[str]:
    """`all` or a comma list of entries (or a list of them, from the page) -> the entries' names;
    SettingError names --drafters and what it takes."""
    names = text if isinstance(text, (list, tuple)) else [n.strip() for n in str(text or "").split(",")]
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        raise SettingError("--drafters", f"choose at least one drafter: {ALL}, or some of "
                                         f"{', '.join(available(registry, spec))}")
    if names == [ALL]:
        return available(registry, spec)
    return names


def entry(name: str, base: RunConfig, registry, spec) -> Entry:
    """One entry's run over the base (the pair, length, temperature, runner): the probe's γ."""
    probe = replace(base, gamma=PROBE_GAMMA, speculation=CHAIN, tree_depth=PROBE_GAMMA, adaptive=False)
    name_only, _, quantization = name.partition(QUANTIZED)
    kind, _, draft = name_only.partition(":")
    tree = kind == TREE or kind.endswith(TREE_SUFFIX)
    drafter = MODEL if kind == TREE else kind.removesuffix(TREE_SUFFIX) if tree else kind
    if drafter not in DRAFTERS or (tree and drafter not in TREE_DRAFTERS) or (draft and drafter != MODEL):
        raise SettingError("--drafters", f"unknown drafter {name!r}; the board knows {ALL}, "
                                         f"{', '.join(available(registry, spec))}, and {MODEL}:NAME for any "
                                         f"model of models.yaml, either as {MODEL}{QUANTIZED}Q or "
                                         f"{MODEL}:NAME{QUANTIZED}Q in a quantization Q")
    if quantization:
        if drafter != MODEL:
            raise SettingError("--drafters", f"{name}: only a draft model has a quantization ({MODEL}{QUANTIZED}Q "
                                             f"or {MODEL}:NAME{QUANTIZED}Q)")
        if quantization not in MODEL_QUANTIZATIONS:
            raise SettingError("--drafters", f"{name}: the quantization must be one of "
                                             f"{', '.join(MODEL_QUANTIZATIONS)}, got {quantization!r}")
        probe = replace(probe, draft_quantization=quantization)
    if draft:
        try:
            registry.model(draft)
        except ValueError as error:
            raise SettingError("--drafters", f"{name}: {error}") from None
        if draft == spec.target:
            raise SettingError("--drafters", f"{name}: that is the target; the target drafts for itself as 'self'")
        probe = replace(probe, draft="" if draft == spec.draft else draft, draft_vocab=0)
    return Entry(name, replace(probe, drafter=drafter, speculation=TREE if tree else CHAIN))


def entries(names: list[str], base: RunConfig, registry, spec) -> list[Entry]:
    """The entries in measuring order: the pair's own draft's first, then each other draft model or
    quantization's, so each pair is loaded once (the cache holds one at a time)."""
    made = [entry(name, base, registry, spec) for name in names]
    loads = list(dict.fromkeys([loaded_as(base), *(loaded_as(e.cell) for e in made)]))
    return sorted(made, key=lambda e: loads.index(loaded_as(e.cell)))


def loaded_as(cell: RunConfig) -> tuple[str, str]:
    """What a cell's pair is loaded with beyond the pair itself: its draft model and that model's quantization."""
    return cell.draft, cell.draft_quantization


def plan_of(entries_: list[Entry], base: RunConfig, prompts, **options) -> Plan:
    """The probe round as a sweep plan: one cell per entry, over the same prompts."""
    if not prompts:
        raise SettingError("prompts", "choose at least one prompt")
    if not entries_:
        raise SettingError("--drafters", "choose at least one drafter")
    axes = {knob: list(dict.fromkeys(getattr(e.cell, knob) for e in entries_))
            for knob in ("draft", "draft_quantization")}
    return Plan(Grid(base, {k: values for k, values in axes.items() if len(values) > 1}),
                [e.cell for e in entries_], list(prompts), **options)


# -- the best γ ----------------------------------------------------------------------------------------


def forecast(records: list[dict], c: float, v, gamma: int) -> float:
    """The formula's speedup had the probe's chains been cut to γ tokens, from its per-position
    counts: tokens per call 1 + Σ_{i<γ} accepted_i / calls, drafting c per drafted token, verifying
    v(1 + drafted per call). v: the target's v(1), v(2), ... through the run's runner."""
    from playground.engine.sampling import verify_cost  # torch: not at import (the CLI's --help stays light)

    calls = sum(r["target_calls"] for r in records)
    if not calls:
        return 1.0
    accepted = sum(sum(r["position_accepted"][:gamma]) for r in records) / calls
    drafted = sum(sum(r["position_drafted"][:gamma]) for r in records) / calls
    return (1 + accepted) / (c * drafted + verify_cost(v, 1 + drafted))


def best_gamma(run: dict, v) -> tuple[int, dict[int, float]]:
    """The γ (1..PROBE_GAMMA) the formula favours for a probe run, and its forecast at each γ."""
    c = run["summary"].get("c", 0.0)
    gammas = range(1, min(PROBE_GAMMA, len(v) - 1) + 1)
    forecasts = {g: forecast(run["prompts"], c, v, g) for g in gammas}
    return max(forecasts, key=lambda g: (forecasts[g], -g)), forecasts


# -- the two rounds --------------------------------------------------------------------------------------


Curve = Callable[[object, str], tuple[float, ...]]  # (a loaded pair, its runner) -> the target's v(1..K)


def rounds(plan: Plan, pair_of, progress, names: list[str], curve_of: Curve,
           stopped: Callable[[], bool] | None = None) -> list[dict]:
    """The probe, then each chain re-measured at its best γ where that is shorter; every run marked
    with its entry (`board`: name, round, the γ chosen, the forecasts, the v(k) it used)."""
    curves: dict[str, tuple[float, ...]] = {}

    def v_of(run: dict, cell: RunConfig) -> tuple[float, ...]:
        if run["runner"] not in curves:
            curves[run["runner"]] = tuple(curve_of(pair_of(cell), run["runner"]))
        return curves[run["runner"]]

    def marked(cells: list[RunConfig], labels: list[str], round_: int, report):
        def hear(step: Progress) -> None:  # a run names its entry as soon as it is measured
            if step.run is not None:
                step.run["board"] = {"entry": labels[cells.index(step.cell)], "round": round_}
            report(step)
        return hear

    # reference engines' own plain loops (--reference) are timed once, beside the first entry: they
    # name the fastest plain decoding, and timing them beside every entry would double the board
    first, rest = replace(plan, cells=plan.cells[:1]), replace(plan, cells=plan.cells[1:], reference=False,
                                                                llamacpp=False, ortgenai=False)
    total = first.total_runs + rest.total_runs

    def of_all(step: Progress) -> None:
        progress(replace(step, total=total))

    probes = measure(first, pair_of, marked(plan.cells, names, 1, of_all), stopped)
    probes += measure(rest, pair_of, marked(plan.cells, names, 1, of_all), stopped, done=first.total_runs)
    again, marks = [], []
    for name, cell, run in zip(names, plan.cells, probes):
        if not run["prompts"]:
            marks.append({"entry": name, "round": 1})
            continue
        v = v_of(run, cell)
        chosen, forecasts = best_gamma(run, v) if cell.speculation == CHAIN else (PROBE_GAMMA, {})
        marks.append({"entry": name, "round": 1, "best_gamma": chosen, "v": list(v),
                      "forecast": {str(g): f for g, f in forecasts.items()}})
        if chosen != cell.gamma:
            again.append((name, replace(cell, gamma=chosen), marks[-1]))
    for run, mark in zip(probes, marks):
        run["board"] = mark
    if not again:
        return probes
    second = Plan(plan.grid, [cell for _, cell, _ in again], plan.prompts, repeats=plan.repeats,
                  warmup=plan.warmup, command=plan.command)
    done = total

    def onward(step: Progress) -> None:  # the total grows by the second round's runs
        progress(replace(step, total=total + second.total_runs))

    remeasured = measure(second, pair_of, marked(second.cells, [n for n, _, _ in again], 2, onward), stopped,
                         done=done)
    for (name, cell, mark), run in zip(again, remeasured):
        run["board"] = {**mark, "round": 2}
    return probes + remeasured


def estimate_seconds(plan: Plan, step_s: float, self_entries: int = 0) -> tuple[float, float]:
    """(least, most) seconds the board will take: every run at the plain step's pace (a drafter that
    wins shortens it, one that loses lengthens it), the probe alone or every chain measured twice; a
    self-drafting entry's draft steps cost about as much again. References run beside the first entry only."""
    per_run = max(MIN_SECONDS_PER_RUN, plan.cells[0].max_new_tokens * step_s * 1.2)
    plain = replace(plan, reference=False, llamacpp=False, ortgenai=False).runs_per_cell
    runs = plan.runs_per_cell + (len(plan.cells) - 1 + self_entries) * plain
    chains = sum(c.speculation == CHAIN for c in plan.cells)
    return runs * per_run, (runs + chains * plain) * per_run
