"""The drafts board's lineup: which entries it offers for a pair, each as a run at the probe's γ,
and the probe round as a plan of the one sweep (the rounds that measure it: rounds.py).

Entries, as `--drafters` and the page write them:
  model              the pair's draft model, with the draft vocabulary the pair suggests
  model:NAME         any model of models.yaml drafting over its whole vocabulary (NAME the pair's
                     own draft: its full vocabulary; another tokenizer: drafted across tokenizers)
  prompt_lookup, suffix, recycling, self, hybrid   the drafters with no second model, or a view
  tree, suffix-tree, recycling-tree, hybrid-tree, self-tree   each drafter's token tree
  model@Q, model:NAME@Q                             a draft model in another quantization Q (`all` adds the
                                                    pair's draft in each of WORTH_TRYING's on this device)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from playground.config import AUTO_QUANTIZATION, CHAIN, DRAFTERS, MODEL, MODEL_QUANTIZATIONS, TREE, TREE_DRAFTERS, \
    RunConfig
from playground.measure.bench.sweep import Grid, Plan, SettingError

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


def estimate_seconds(plan: Plan, step_s: float, self_entries: int = 0) -> tuple[float, float]:
    """(least, most) seconds the board will take: every run at the plain step's pace (a drafter that
    wins shortens it, one that loses lengthens it), the probe alone or every chain measured twice; a
    self-drafting entry's draft steps cost about as much again. References run beside the first entry only."""
    per_run = max(MIN_SECONDS_PER_RUN, plan.cells[0].max_new_tokens * step_s * 1.2)
    plain = replace(plan, reference=False, llamacpp=False, ortgenai=False).runs_per_cell
    runs = plan.runs_per_cell + (len(plan.cells) - 1 + self_entries) * plain
    chains = sum(c.speculation == CHAIN for c in plan.cells)
    return runs * per_run, (runs + chains * plain) * per_run
