"""Whether the race's draft can pay here, said before the race (measure/teach/verdict.py), from what
this app run has measured by the time the pair is loaded and warm:

- α: the pair's (models.yaml) where it speaks for the run, else this session's drafts board's for
  this draft, else assumed (verdict.ASSUMED_ALPHA) and said so;
- c and v(k) through the race's runner: those the pair's γ was followed from at load
  (measure/bench/follow.py), else the Theory or Lesson tab's (ctx.costs), else c from the plain steps
  auto recorded for both models here (runners/choice.py) with v(k) unmeasured. None of these: nothing
  is said;
- what the same measurements favour: the other runners both models were timed on, the board's
  model-free drafters and self-drafting (else the α they would need with this v(k)), and the
  registry's bigger models that fit the free memory, sized without loading them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from playground.config import MODEL, PROMPT_LOOKUP, SELF, SUFFIX, TREE, RunConfig
from playground.measure.teach.verdict import (ASSUMED, ASSUMED_ALPHA, Alpha, Costs, Verdict, bigger_targets,
                                              model_free, other_runner, self_drafting, verdict)

log = logging.getLogger(__name__)
BOARD, AT_LOAD = "this session's drafts board", "measured when the pair loaded"


def before_race(ctx, pair, settings: RunConfig, session: str | None) -> Verdict | None:
    """The verdict for a chain of the draft model on the loaded pair; None where it does not apply (another
    drafter, a tree), nothing has measured c here yet, or gathering it failed (the race needs none of it)."""
    if settings.drafter != MODEL or settings.speculation == TREE:
        return None
    try:
        return gathered(ctx, pair, settings, session)
    except Exception:
        log.exception("the verdict on whether the draft pays failed")
        return None


def gathered(ctx, pair, settings: RunConfig, session: str | None) -> Verdict | None:
    spec = ctx.registry.pair(settings.pair or ctx.default_pair)
    costs = measured(ctx, pair, spec, settings)
    if costs is None:
        return None
    board = board_measured(ctx, spec.name, session)
    alpha = acceptance(spec, settings, board)
    said = verdict(alpha, costs)
    # what else pays is looked for only where this draft does not (it reads files to size the other targets)
    return verdict(alpha, costs, alternatives(ctx, pair, settings, alpha, costs, board)) if said.shown else said


def acceptance(spec, settings: RunConfig, board: dict) -> Alpha:
    from playground.measure.bench.follow import follows

    if follows(spec, settings):
        return Alpha(spec.alpha, "models.yaml")
    entry = MODEL if settings.draft in ("", spec.draft) else f"{MODEL}:{settings.draft}"
    return Alpha(board[entry][0], BOARD) if entry in board else Alpha(ASSUMED_ALPHA, ASSUMED)


def measured(ctx, pair, spec, settings: RunConfig) -> Costs | None:
    from playground.measure.bench.follow import follows
    from playground.measure.teach.theory import resolved

    followed = ctx.followed.get(spec.name)
    if followed is not None and follows(spec, settings):
        return Costs(followed.steps, followed.v, followed.runner, AT_LOAD)
    runner = resolved(settings.runner, pair.target)
    known = ctx.costs.known(pair.target.name, pair.draft.name).get(runner)
    if known is not None:
        return Costs(known.steps, known.target.v, runner, "measured by the Theory or Lesson tab")
    steps = recorded_steps(pair, settings)
    if runner in steps:
        target_ms, draft_ms = steps[runner]
        return Costs(draft_ms / target_ms, None, runner, "auto's plain steps recorded on this machine")
    return None


def recorded_steps(pair, settings: RunConfig) -> dict[str, tuple[float, float]]:
    """runner -> (the target's plain step, the draft's) in ms, as auto timed both here (runners/choice.py),
    at the threads the race runs on, each in its role, for the race's length (its prompt unknown yet: its
    new tokens) or the nearest timed; {} where nothing is recorded or a model has no build to key it by."""
    from playground.engine.runners.choice import DRAFT, TARGET, nearest
    from playground.engine.runners.warmup import run_context
    from playground.measure.bench.machine import spare_a_core

    context = run_context(settings, None)
    try:
        with spare_a_core():
            target = (nearest(pair.target.model, None, TARGET, context) or {}).get("step_ms", {})
            draft = (nearest(pair.draft.model, settings.draft_vocab or None, DRAFT, context) or {}).get("step_ms", {})
    except (ValueError, OSError):
        return {}
    return {runner: (ms, draft[runner]) for runner, ms in target.items() if runner in draft}


def board_measured(ctx, pair: str, session: str | None) -> dict[str, tuple[float, float]]:
    """This session's drafts-board entries on the pair: entry -> (α, c) of its last round."""
    from playground.measure.bench.board.table import final_runs

    runs = final_runs({"runs": ctx.boards.runs(session, pair)})
    return {r["board"]["entry"]: (r["summary"]["alpha"], r["summary"]["c"]) for r in runs
            if r["summary"].get("prompts") and r["summary"].get("alpha") is not None}


def alternatives(ctx, pair, settings: RunConfig, alpha: Alpha, costs: Costs, board: dict) -> list:
    layers = pair.target.model.config.get_text_config().num_hidden_layers
    kept = settings.kept_layers or max(1, layers // 2)  # the self drafter's default: half
    return [*other_runners(ctx, pair, settings, alpha, costs),
            model_free(costs.v, {k: board[k] for k in (PROMPT_LOOKUP, SUFFIX) if k in board}),
            self_drafting(costs.v, layers, kept, board.get(SELF)) if 1 <= kept < layers else None,
            bigger_targets(costs.c, sized_models(ctx, pair), pair.target.footprint_bytes,
                           free_bytes(pair.target.device))]


def other_runners(ctx, pair, settings: RunConfig, alpha: Alpha, costs: Costs) -> list:
    """This draft on each other runner both models were timed on, against the fastest plain step timed
    (auto's recorded steps first: one method for every runner)."""
    steps = recorded_steps(pair, settings)
    known = ctx.costs.known(pair.target.name, pair.draft.name)
    plain = {**{r: k.target.step_s * 1000 for r, k in known.items()}, **{r: t for r, (t, _) in steps.items()}}
    fastest = min(plain.values(), default=None)
    found = []
    for runner in sorted((set(steps) | set(known)) - {costs.runner}):
        c, v = (known[runner].c, known[runner].target.v) if runner in known else (steps[runner][1] / steps[runner][0], None)
        found.append(other_runner(runner, alpha, c, v, plain.get(runner), fastest))
    return found


def sized_models(ctx, pair) -> list[tuple[str, int]]:
    """The registry's other targets (the models its pairs serve as targets) whose size is known without
    loading or downloading them: a model pack's GGUF file on a CPU (where its int4 weights run as they
    are stored), a checkpoint on disk (a local one, or the hub's cache) counted from its safetensors
    headers (models/fits.py)."""
    from playground.models.modelpack import load_catalog

    catalog, device, out = load_catalog(), str(pair.target.device), []
    for name in dict.fromkeys(p.target for p in ctx.registry.pairs.values()):
        model = ctx.registry.model(name)
        if name in (pair.target.name, pair.draft.name) or model.random_weights:
            continue
        for source in model.sources:
            size = (catalog[source.ref].bytes if source.kind == "pack" and source.ref in catalog and device == "cpu"
                    else checkpoint_bytes(source, pair.target.dtype, model.quantization))
            if size:
                out.append((name, size))
                break
    return out


def checkpoint_bytes(source, dtype: str, quantization: str) -> int | None:
    """A checkpoint's weights as they would load (fits.weight_bytes), where it is on disk; else None."""
    from playground.models.fits import weight_bytes

    try:
        if source.kind == "local" and Path(source.ref).is_dir():
            path = Path(source.ref)
        elif source.kind == "hub" and not source.gguf_file:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(source.ref, revision=source.revision, local_files_only=True))
        else:
            return None
        return weight_bytes(path, dtype, quantization) or None
    except Exception:  # not cached, unreadable, an unusual layout: not sized, so not named
        return None


def free_bytes(device) -> int:
    """Memory free for another model: the card's (models/fits.py), or the machine's on a CPU."""
    if str(device).startswith("cuda"):
        from playground.models.fits import free_bytes as on_card

        return on_card()[0]
    import psutil

    return psutil.virtual_memory().available
