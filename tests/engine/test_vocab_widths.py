"""Lossless at every vocabulary width: p is the target's whole distribution, whatever the draft's width.

A draft narrower than the target (a trimmed or older vocabulary) and one wider (padding rows past
the target's ids) against a target of 12 ids: the joint law of the first two tokens follows the
target's exact law, sampled (T 1, and T 0.8 with top-k and top-p) and greedy, for a chain and a
tree, the model drafter, the hybrid and a draft with another tokenizer. The rule an earlier engine
had (p cut to the narrower width) is planted back and caught by the same check.
"""

import numpy as np
import pytest
import torch

from playground.engine import generate as engine
from playground.engine.drafters import ModelDrafter
from playground.engine.events import output_tokens
from playground.engine.generate import SpecConfig, generate
from playground.engine.hybrid import HybridDrafter
from playground.engine.sampling import Sampling, logits_to_probs
from playground.engine.suffix import SuffixDrafter
from playground.engine.tree_drafter import TreeDrafter
from playground.engine.universal import UniversalDrafter
from playground.measure.teach.stats import goodness_of_fit
from playground.models.tiny import tiny_model

TARGET, NARROW, WIDE = 12, 9, 15  # logit widths: the target's three last ids are past the narrow draft
PROMPT = [1, 5, 2]
DRAWS = 1000  # the cut rule moves the joint by a total variation of ~0.3 at these widths: caught at 500
SAMPLED = {"T 1": dict(temperature=1.0), "T 0.8, top-k 8, top-p 0.9": dict(temperature=0.8, top_k=8, top_p=0.9)}


def biased(model, ids, bias: float):
    """The model's head with `bias` added to the logits of `ids`: where a test needs mass there."""
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[list(ids)] = bias
    model.lm_head = head
    return model


@pytest.fixture(scope="module")
def models():
    """The target gives its last three ids real mass; the wide draft puts much of q on its own extra ids."""
    target = biased(tiny_model(TARGET, 2, seed=31, logit_scale=0.25), range(NARROW, TARGET), 0.8)
    narrow = tiny_model(NARROW, 1, seed=32, logit_scale=0.25)
    wide = biased(tiny_model(WIDE, 1, seed=33, logit_scale=0.25), range(TARGET, WIDE), 1.5)
    return {"target": target, "narrow": narrow, "wide": wide}


def exact_joint(target, sampling: Sampling) -> np.ndarray:
    """p(t1, t2 | prompt) from the target's own forwards, processed as the run processes them."""
    with torch.inference_mode():
        first = logits_to_probs(target(torch.tensor([PROMPT])).logits[0, -1], sampling)
        batch = torch.tensor([PROMPT + [t] for t in range(TARGET)])
        second = logits_to_probs(target(batch).logits[:, -1], sampling)
    return (first[:, None] * second).flatten().double().numpy()


def joint_counts(target, make_drafter, knobs: dict, draws: int = DRAWS) -> np.ndarray:
    """Counts of the first two tokens over `draws` seeds, a fresh drafter each."""
    counts = np.zeros(TARGET * TARGET)
    for seed in range(draws):
        config = SpecConfig(gamma=2, seed=seed, max_new_tokens=2, runner="eager", **knobs)
        out = output_tokens(generate(target, PROMPT, config, make_drafter()))
        counts[out[0] * TARGET + out[1]] += 1
    return counts


def chain(draft):
    """A chain drafter as the factory makes it: told the target's width."""
    return lambda: ModelDrafter(draft, TARGET, runner="eager")


def tree(draft):
    return lambda: TreeDrafter(draft, budget=6, depth=2, branching=2, vocab_size=TARGET, runner="eager")


def truncating(target_logits, q):
    """The earlier rule: p and q both cut to the narrower of the two widths."""
    width = min(target_logits.shape[-1], q.shape[-1])
    return target_logits[..., :width], q[..., :width]


@pytest.mark.parametrize("shape", [chain, tree], ids=["chain", "tree"])
@pytest.mark.parametrize("width", ["narrow", "wide"])
@pytest.mark.parametrize("knobs", SAMPLED.values(), ids=SAMPLED.keys())
def test_sampled_joint_follows_the_target_at_any_draft_width(models, shape, width, knobs):
    target = models["target"]
    counts = joint_counts(target, shape(models[width]), knobs)
    fit = goodness_of_fit(counts, exact_joint(target, SpecConfig(**knobs).sampling))
    assert fit.p_value > 1e-4, fit
    assert counts.reshape(TARGET, TARGET)[NARROW:].sum() > 0  # ids past the narrow draft come out


@pytest.mark.parametrize("shape", [chain, tree], ids=["chain", "tree"])
def test_the_joint_check_catches_p_cut_to_the_drafts_width(models, shape, monkeypatch):
    monkeypatch.setattr(engine, "common_width", truncating)
    target = models["target"]
    counts = joint_counts(target, shape(models["narrow"]), SAMPLED["T 1"], draws=500)
    fit = goodness_of_fit(counts, exact_joint(target, SpecConfig(temperature=1.0).sampling))
    assert fit.p_value < 1e-4, fit


def test_a_wide_draft_driven_bare_is_refused_naming_both_widths(models):
    """Without the target's width a wide draft would propose ids the target cannot read."""
    with pytest.raises(ValueError, match=f"15 ids, the target's logits {TARGET}.*vocab_size={TARGET}"):
        next(generate(models["target"], PROMPT, SpecConfig(runner="eager"), ModelDrafter(models["wide"])))


def test_given_the_targets_width_a_wide_draft_drafts_only_the_targets_ids(models):
    drafter = ModelDrafter(models["wide"], TARGET, runner="eager")
    proposal = drafter.propose(PROMPT, 4, Sampling(temperature=1.0), torch.Generator().manual_seed(0))
    assert proposal.q.shape == (len(proposal.tokens), TARGET)
    assert torch.allclose(proposal.q.sum(-1), torch.ones(len(proposal.tokens)))


def greedy_reference(model, n: int) -> list[int]:
    """The target's own greedy continuation, one full forward per token (no cache, no engine)."""
    ids = list(PROMPT)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(PROMPT):]


@pytest.mark.parametrize("width", ["narrow", "wide"])
@pytest.mark.parametrize("shape", [chain, tree], ids=["chain", "tree"])
def test_greedy_emits_the_targets_argmax_past_the_drafts_width(models, width, shape):
    target = biased(tiny_model(TARGET, 2, seed=31, logit_scale=0.25), [TARGET - 1], 0.5)
    reference = greedy_reference(target, 24)
    assert TARGET - 1 in reference and len(set(reference)) > 1  # past the narrow draft's width, and not only
    config = SpecConfig(gamma=3, max_new_tokens=24, runner="eager")
    assert output_tokens(generate(target, PROMPT, config, shape(models[width])())) == reference


def hybrid(draft):
    return lambda: HybridDrafter(SuffixDrafter(), ModelDrafter(draft, TARGET, runner="eager"))


@pytest.mark.parametrize("width", ["narrow", "wide"])
def test_the_hybrid_follows_the_target_at_any_draft_width(models, width):
    target = models["target"]
    counts = joint_counts(target, hybrid(models[width]), SAMPLED["T 1"])
    fit = goodness_of_fit(counts, exact_joint(target, SpecConfig(temperature=1.0).sampling))
    assert fit.p_value > 1e-4, fit


# -- a draft with another tokenizer, whose target has more logit rows than its tokenizer has ids --


@pytest.fixture(scope="module")
def tokenizers():
    from test_universal import DRAFT_VOCAB, TARGET_VOCAB, bpe_tokenizer

    target = bpe_tokenizer(TARGET_VOCAB, [("a", "b"), ("c", "a")], ["<|end|>", "<|pad|>"])
    draft = bpe_tokenizer(DRAFT_VOCAB, [("d", "d"), ("a", "b")], ["<|end|>", "<|sep|>"])
    return target, draft


def across(tokenizers, draft, width):
    """The universal drafter given `width` as the target's (here its tokenizer's 8 ids, fewer than
    its 12 logit rows, as a caller that counts the tokenizer would): q has that width."""
    target_tokenizer, draft_tokenizer = tokenizers
    return lambda: UniversalDrafter(draft, draft_tokenizer, target_tokenizer, width, runner="eager")


@pytest.mark.parametrize("width", ["narrow", "wide"])
def test_a_draft_with_another_tokenizer_follows_the_target_at_any_width(models, tokenizers, width):
    target = models["target"]
    counts = joint_counts(target, across(tokenizers, models[width], 8), SAMPLED["T 1"], draws=1000)
    fit = goodness_of_fit(counts, exact_joint(target, SpecConfig(temperature=1.0).sampling))
    assert fit.p_value > 1e-4, fit
    assert counts.reshape(TARGET, TARGET)[8:].sum() > 0  # the target's ids past its tokenizer come out


def test_the_cross_tokenizer_check_catches_p_cut_to_the_drafts_width(models, tokenizers, monkeypatch):
    monkeypatch.setattr(engine, "common_width", truncating)
    target = models["target"]
    counts = joint_counts(target, across(tokenizers, models["narrow"], 8), SAMPLED["T 1"], draws=500)
    fit = goodness_of_fit(counts, exact_joint(target, SpecConfig(temperature=1.0).sampling))
    assert fit.p_value < 1e-4, fit
