"""From the run configuration to what the engine runs: the drafter and the engine's SpecConfig.
Here, not in config.py, so the configuration stays a leaf that imports no engine."""

from __future__ import annotations

from dataclasses import dataclass, replace

from playground.config import (CHAIN, DRAFT_MODEL_DRAFTERS, HYBRID, MODEL, MODEL_FREE, PROMPT_LOOKUP, SELF,
                               SUFFIX, TREE, KnobError, RunConfig, group)
from playground.engine.generate import SpecConfig


@dataclass(frozen=True)
class Models:
    """What a run's drafter may draft with: the target, the draft model, and the draft's own
    tokenizer when it is not the target's (None: they share one, ids are drafted directly)."""

    target: object
    draft: object | None
    target_tokenizer: object | None = None
    draft_tokenizer: object | None = None

    @classmethod
    def of(cls, pair, run: RunConfig | None = None) -> "Models":
        """A loaded pair's models (models.loading.LoadedPair, read by its fields). Given the `run`
        they serve, the draft only when its drafter runs the draft model (the pair loads it on
        first use: prompt lookup, suffixes and recycling leave it unloaded); None: the draft too."""
        if run is not None and run.drafter not in DRAFT_MODEL_DRAFTERS:
            return cls(pair.target.model, None, pair.tokenizer, None)
        across = not pair.same_tokenizer
        return cls(pair.target.model, pair.draft.model, pair.tokenizer, pair.draft.tokenizer if across else None)


def spec_config(run: RunConfig, **engine_only) -> SpecConfig:
    """The engine's SpecConfig (the run's decoding knobs), plus engine-only options (detail, stop_strings)."""
    return SpecConfig(**{k.name: getattr(run, k.name) for k in group("decoding")}, runner=run.runner,
                      tree=run.speculation == TREE, **engine_only)


def make_drafter(run: RunConfig, models: Models):
    """A fresh drafter for one run. A model drafter owns a KV cache, run by the run's runner, as the
    target's is: the baseline and the speculative run share it."""
    if run.drafter in MODEL_FREE:
        return model_free_drafter(run, models.target)
    if run.drafter == SELF:
        from playground.engine.self_draft import LayerSearch, SelfDrafter

        return SelfDrafter(models.target, run.kept_layers or None, search=LayerSearch(seed=run.seed),
                           runner=run.runner, speculation=run.speculation, tree=tree_shape(run))
    if run.drafter == HYBRID:
        from playground.engine.hybrid import HybridDrafter

        return HybridDrafter(model_free_drafter(replace(run, drafter=SUFFIX), models.target),
                             draft_model_drafter(run, models))
    return draft_model_drafter(run, models)


def tree_shape(run: RunConfig) -> dict:
    """A run's tree knobs as a tree drafter takes them."""
    return {"budget": run.tree_budget, "depth": run.tree_depth, "branching": run.tree_branching,
            "width": run.tree_width}


def drafter_settings(run: RunConfig) -> tuple:
    """The settings a drafter is built from: two runs equal in these may share one drafter object
    (one that learns across runs keeps what it learned)."""
    return (run.pair, run.draft, run.runner, run.seed, *(getattr(run, k.name) for k in group("drafter")))


def model_free_drafter(run: RunConfig, target):
    """Prompt lookup, suffix decoding or token recycling: no forward, their bookkeeping is their c."""
    if run.drafter == PROMPT_LOOKUP:
        from playground.engine.drafters import PromptLookupDrafter

        return PromptLookupDrafter(run.ngram_min, run.ngram_max)
    if run.drafter == SUFFIX:
        from playground.engine.suffix import SuffixDrafter

        return SuffixDrafter(run.speculation, run.tree_budget, run.tree_depth)
    from playground.engine.recycling import TokenRecyclingDrafter

    return TokenRecyclingDrafter(target.config.get_text_config().vocab_size, run.speculation,
                                 budget=run.tree_budget, depth=run.tree_depth, branching=run.tree_branching)


def draft_model_drafter(run: RunConfig, models: Models):
    """The draft model as a chain or a tree; across tokenizers when it does not share the target's."""
    vocab = run.draft_vocab or None
    if models.draft_tokenizer is not None:
        return universal_drafter(run, models)
    width = models.target.config.get_text_config().vocab_size  # the draft drafts the target's ids only
    if run.speculation == TREE:
        from playground.engine.tree_drafter import TreeDrafter

        return TreeDrafter(models.draft, vocab_size=width, draft_vocab=vocab, runner=run.runner, **tree_shape(run))
    from playground.engine.drafters import ModelDrafter

    return ModelDrafter(models.draft, width, draft_vocab=vocab, runner=run.runner)


def universal_drafter(run: RunConfig, models: Models):
    """A draft with another tokenizer: chains only, over its whole vocabulary."""
    from playground.engine.universal import UniversalDrafter

    check_models(run, models)
    return UniversalDrafter(models.draft, models.draft_tokenizer, models.target_tokenizer,
                            models.target.config.get_text_config().vocab_size, runner=run.runner)


def check_models(run: RunConfig, models: Models) -> None:
    """What the run asks of its draft model that this draft cannot do, as an error naming the knob: called
    before anything is built or compiled for the run, and again by the drafter. A draft with another
    tokenizer drafts chains only (its tokens are re-encoded one chain at a time) over its whole vocabulary
    (draft_vocab counts the target's token ids, which mean nothing to it)."""
    if models.draft_tokenizer is None or run.drafter not in DRAFT_MODEL_DRAFTERS:
        return
    if run.speculation == TREE:
        raise KnobError("speculation", "speculation must be 'chain' for a draft with another tokenizer than the "
                                       "target's (its tokens are re-encoded one chain at a time), got 'tree'")
    if run.draft_vocab:
        raise KnobError("draft_vocab", "draft_vocab must be 0 for a draft with another tokenizer than the target's "
                                       f"(it counts the target's token ids), got {run.draft_vocab}")


def model_drafter(run: RunConfig, models: Models):
    """The run's draft model as a chain drafter, whatever drafter the run names: for a measurement
    that needs the draft's q. Its draft vocabulary is the run's, as in every other run."""
    return draft_model_drafter(replace(run, drafter=MODEL, speculation=CHAIN), models)
