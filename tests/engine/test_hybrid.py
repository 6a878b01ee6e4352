"""The hybrid drafter (engine/hybrid.py): suffixes first, the draft model where they find nothing,
as chains and as trees. Greedy output equals the target's own; sampled, the first two tokens follow
the target's joint distribution, and the check fails on a wrong verification rule."""

import itertools

import numpy as np
import pytest

from playground.config import CHAIN, TREE, RunConfig
from playground.engine import factory
from playground.engine import sampling
from playground.engine.drafters import ModelDrafter
from playground.engine.events import output_tokens, summarize
from playground.engine.generate import SpecConfig, generate
from playground.engine.hybrid import HybridDrafter
from playground.engine.suffix import SuffixDrafter
from playground.engine.tree_drafter import TreeDrafter
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import encode_prompt

from test_engine import PROMPT, hf_greedy
from test_suffix import KNOBS, PROMPT_IDS, exact_joint, fed

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
JOINT_DRAWS = 1500
# Earlier runs in which every token but 2 went on: after the prompt (1, 5, 2) the suffixes find
# nothing, so the model drafts the first step, and after almost any first token they draft the second
HISTORY = [[0, 3], [3, 6], [4, 7], [6, 0], [7, 4]]


def hybrid(speculation, draft, *history, budget=6, depth=2):
    """Timed on a clock that ticks once a reading, so its choices are the same on a busy machine: a
    verification costs one tick whatever its rows, a draft model call one."""
    first = fed(SuffixDrafter(speculation, budget=budget, depth=depth, spec_factor=2.0, min_prob=0.0), *history)
    second = TreeDrafter(draft, budget, depth, 2) if speculation == TREE else ModelDrafter(draft)
    return HybridDrafter(first, second, clock=itertools.count().__next__)


@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_greedy_equals_transformers_generate_and_both_drafters_propose(pair, speculation):
    """The tiny target falls into a loop: the draft model drafts until the suffixes find it."""
    target, draft, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    drafter = hybrid(speculation, draft, budget=8, depth=4)
    events = list(generate(target, ids, SpecConfig(max_new_tokens=40, gamma=4), drafter))
    assert output_tokens(events) == hf_greedy(target, ids, 40)
    calls = summarize(events).target_calls
    assert 0 < drafter.fell_back < calls - 1  # the model proposed some steps, the suffixes others
    assert (events[1].tree is not None) == (speculation == TREE)


def test_the_factory_makes_a_hybrid_tree_of_both_trees(pair):
    target, draft, _ = pair
    made = factory.make_drafter(RunConfig(pair="tiny", drafter="hybrid", speculation=TREE, tree_depth=3),
                                factory.Models(target, draft))
    assert made.speculation == TREE and made.depth == 3
    assert made.first.speculation == made.fallback.speculation == TREE
    with pytest.raises(ValueError, match="^speculation: a hybrid drafter's two drafters must both"):
        HybridDrafter(SuffixDrafter(TREE), ModelDrafter(draft))


def joint_counts(pair, knobs, draws=JOINT_DRAWS, speculation=TREE):
    target, draft = pair
    counts, fell_back, suffixed = np.zeros(64), 0, 0
    for seed in range(draws):
        drafter = hybrid(speculation, draft, *HISTORY)
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3, **knobs)
        events = list(generate(target, PROMPT_IDS, config, drafter))
        out = output_tokens(events)
        counts[out[0] * 8 + out[1]] += 1
        fell_back += drafter.fell_back
        suffixed += sum(e.source == "suffixes" or (e.tree is not None and len(e.tree.nodes) > 0)
                        for e in events) - (drafter.fell_back if speculation == TREE else 0)
    return counts, fell_back, suffixed


@pytest.mark.parametrize("knob", KNOBS)
def test_two_token_joint_of_a_hybrid_tree_follows_target(small_vocab_pair, knob):
    counts, fell_back, suffixed = joint_counts(small_vocab_pair, KNOBS[knob])
    assert fell_back >= JOINT_DRAWS and suffixed > 100  # the model's trees and the suffixes' both played a part
    fit = goodness_of_fit(counts, exact_joint(small_vocab_pair[0], PROMPT_IDS, 8, KNOBS[knob]))
    assert fit.p_value > 1e-4, fit


def test_two_token_joint_of_a_hybrid_chain_follows_target(small_vocab_pair):
    """Chains: each step's source chosen by its expected tokens per second (the first steps on the
    priors: the draft model after the prompt, where the suffixes find nothing, then either)."""
    counts, fell_back, suffixed = joint_counts(small_vocab_pair, KNOBS["top_k"], speculation=CHAIN)
    assert fell_back >= JOINT_DRAWS and suffixed > 100  # the model's chains and the suffixes' both played a part
    fit = goodness_of_fit(counts, exact_joint(small_vocab_pair[0], PROMPT_IDS, 8, KNOBS["top_k"]))
    assert fit.p_value > 1e-4, fit


@pytest.mark.parametrize("speculation", [CHAIN, TREE])
def test_two_token_joint_check_catches_a_wrong_rule(small_vocab_pair, monkeypatch, speculation):
    """Wrong on purpose: after a rejection the token is drawn from p itself, not the residual
    norm(max(0, p - q)), so rejected tokens come back too often."""
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    counts, _, _ = joint_counts(small_vocab_pair, KNOBS["top_k"], speculation=speculation)
    fit = goodness_of_fit(counts, exact_joint(small_vocab_pair[0], PROMPT_IDS, 8, KNOBS["top_k"]))
    assert fit.p_value < 1e-4, fit


def test_a_long_match_speculates_past_the_draft_models_gamma(pair):
    """γ 1 caps the draft model, not the suffixes: once the tiny target loops, the suffixes' match
    drafts several tokens a step, each step saying which source drafted it and why."""
    target, draft, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    drafter = hybrid(CHAIN, draft)
    events = list(generate(target, ids, SpecConfig(max_new_tokens=40, gamma=1), drafter))
    assert output_tokens(events) == hf_greedy(target, ids, 40)
    assert any(e.source == "suffixes" and len(e.drafts) > 1 for e in events)
    assert all(e.why for e in events if e.index > 0)
