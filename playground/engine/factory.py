"""From the run configuration to what the engine runs: the drafter and the engine's SpecConfig.
Here, not in config.py, so the configuration stays a leaf that imports no engine."""

from __future__ import annotations

from dataclasses import replace

from playground.config import CHAIN, MODEL, PROMPT_LOOKUP, TREE, RunConfig, group
from playground.engine.drafters import ModelDrafter, PromptLookupDrafter
from playground.engine.generate import SpecConfig
from playground.engine.tree_drafter import TreeDrafter


def spec_config(run: RunConfig, **engine_only) -> SpecConfig:
    """The engine's SpecConfig (the run's decoding knobs), plus engine-only options (detail, stop_strings)."""
    return SpecConfig(**{k.name: getattr(run, k.name) for k in group("decoding")}, runner=run.runner, **engine_only)


def make_drafter(run: RunConfig, draft_model):
    """A fresh drafter for one run (a model drafter owns a KV cache, run by the run's runner, as the
    target's is: the baseline and the speculative run share it)."""
    vocab = run.draft_vocab or None
    if run.drafter == PROMPT_LOOKUP:
        return PromptLookupDrafter(run.ngram_min, run.ngram_max)
    if run.speculation == TREE and run.drafter == MODEL:
        return TreeDrafter(draft_model, run.tree_budget, run.tree_depth, run.tree_branching,
                           draft_vocab=vocab, width=run.tree_width, runner=run.runner)
    if run.drafter == MODEL:
        return ModelDrafter(draft_model, draft_vocab=vocab, runner=run.runner)
    raise ValueError(f"drafter {run.drafter!r} is not built yet")


def model_drafter(run: RunConfig, draft_model) -> ModelDrafter:
    """The run's draft model as a chain drafter, whatever drafter the run names: for a measurement
    that needs the draft's q. Its draft vocabulary is the run's, as in every other run."""
    return make_drafter(replace(run, drafter=MODEL, speculation=CHAIN), draft_model)
