"""Self-speculative decoding (engine/self_draft.py) on tiny models: the layer-skipping view shares the
target's weights and keeps its own cache, greedy identity with transformers' generate() for fixed
and searched layer sets, the search's choice at least as good as the fixed set, bad constructor
values, and the two-token joint losslessness test at temperature 1 with top-k and top-p on
(failing on a broken rule)."""

import numpy as np
import pytest
import torch

from playground.engine import generate as generate_module
from playground.engine import sampling
from playground.engine.drafters import Drafter
from playground.engine.events import output_tokens, summarize
from playground.engine.generate import SpecConfig, generate
from playground.engine.memory import cache_bytes
from playground.engine.self_draft import (LayerSearch, SelfDrafter, early_exit_layers, greedy_next_tokens,
                                          layer_skip_view, matchness, search_layers, view_of)
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import encode_prompt

from test_engine import PROMPT, hf_greedy

TOKENS = 40


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def reference(pair):
    target, _, tokenizer = pair
    ids = encode_prompt(tokenizer, PROMPT)
    return ids, hf_greedy(target, ids, TOKENS)


def run(target, ids, drafter, runner="eager", **knobs):
    return list(generate(target, ids, SpecConfig(max_new_tokens=TOKENS, runner=runner, gamma=4, **knobs), drafter))


def test_view_shares_the_targets_weights_and_is_the_early_exit_model(pair, reference):
    target, draft, _ = pair
    view = layer_skip_view(target, (0, 2))
    mine = list(view.parameters())
    theirs = {p.data_ptr(): p for p in target.parameters()}
    assert mine and all(p.data_ptr() in theirs and theirs[p.data_ptr()] is p for p in mine)  # the same tensors
    layers = target.model.layers
    assert list(view.model.layers) == [layers[0], layers[2]]  # the target's own modules, in order
    assert len(mine) == len(list(target.parameters())) - 2 * len(list(layers[1].parameters()))
    ids, _ = reference
    with torch.inference_mode():  # one layer kept: exactly tiny.py's 1-layer early-exit draft
        torch.testing.assert_close(layer_skip_view(target, (0,))(torch.tensor([ids])).logits,
                                   draft(torch.tensor([ids])).logits)
    assert view_of(target, (0, 2)) is view_of(target, (0, 2))  # one view per set, kept on the target


@pytest.mark.parametrize("kept,layers,search", [(2, None, False), (2, (0, 3), False), (2, None, True),
                                                (3, None, True), (1, None, True)])
def test_greedy_output_equals_the_targets(pair, reference, kept, layers, search):
    target, _, _ = pair
    ids, expected = reference
    drafter = SelfDrafter(target, kept, layers=layers, search=LayerSearch() if search else None, runner="eager")
    assert isinstance(drafter, Drafter)
    events = run(target, ids, drafter)
    assert output_tokens(events) == expected
    m = summarize(events)
    assert m.drafted > 0 and m.target_calls < TOKENS
    assert len(drafter.layers) == kept and drafter.layers[0] == 0
    assert (drafter.searched is not None) == (search and kept > 1)  # one layer kept: nothing to search
    if not search:
        assert drafter.layers == (layers or early_exit_layers(4, kept))


def test_static_runner_keeps_greedy_identity(pair, reference):
    target, _, _ = pair
    ids, expected = reference
    assert output_tokens(run(target, ids, SelfDrafter(target, 2, runner="static"), runner="static")) == expected


def test_targets_cache_is_untouched_and_the_draft_caches_only_its_layers(pair, reference, monkeypatch):
    """The target's cache after a self-drafted run equals a plain run's: every layer as long as
    the tokens it holds (a skipped pass writing into it would lengthen the kept layers only) and
    the same keys and values. The drafter's own cache holds entries for its kept layers only."""
    target, _, _ = pair
    ids, _ = reference
    states = []
    start = generate_module.start
    monkeypatch.setattr(generate_module, "start", lambda *a, **kw: states.append(start(*a, **kw)) or states[-1])
    drafter = SelfDrafter(target, 2, layers=(0, 2), search=None, runner="eager")
    run(target, ids, drafter)
    run(target, ids, None)
    spec, plain = states[0].lm, states[1].lm
    n = spec.common_prefix(plain.tokens)
    assert n >= len(ids) + TOKENS - 8
    for mine, theirs in zip(spec.cache.layers, plain.cache.layers, strict=True):
        assert mine.keys.shape[-2] == len(spec.tokens)
        torch.testing.assert_close(mine.keys[..., :n, :], theirs.keys[..., :n, :], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values[..., :n, :], theirs.values[..., :n, :], atol=1e-5, rtol=1e-5)
    own = drafter.drafter.lm.cache
    assert own is not spec.cache
    # layers are made as the forward reaches them: those past the last kept one may not exist at all
    assert [layer.is_initialized for layer in own.layers] == [True, False, True, False][:len(own.layers)]
    assert own.layers[0].keys.shape[-2] == len(drafter.drafter.lm.tokens)
    # what the drafter adds: two layers' keys and values, no weights
    assert drafter.resident_bytes() == cache_bytes(own) == 2 * 2 * own.layers[0].keys.numel() * 4


def test_search_picks_a_set_at_least_as_good_as_the_fixed_one(pair, reference):
    target, _, _ = pair
    ids, _ = reference
    for kept in (2, 3):
        fixed = early_exit_layers(4, kept)
        found = search_layers(target, ids, fixed, budget=8, seed=0)
        layers, score = found.best
        expected = greedy_next_tokens(target, ids, 64)
        assert score == matchness(layer_skip_view(target, layers), ids, expected)
        assert score >= matchness(layer_skip_view(target, fixed), ids, expected)
        assert found.tried[0][0] == fixed and len(found.tried) <= 8
        assert len({t for t, _ in found.tried}) == len(found.tried)  # each set scored once
    assert search_layers(target, ids, (0, 1), seed=3) == search_layers(target, ids, (0, 1), seed=3)  # seeded


def test_search_runs_in_the_first_proposal_so_it_is_timed_as_drafting(pair, reference):
    target, _, _ = pair
    ids, _ = reference
    drafter = SelfDrafter(target, 2, runner="eager")
    drafter.begin(ids)
    assert drafter.searched is None
    drafter.propose(ids, 2, SpecConfig().sampling, None)
    assert drafter.searched is not None and drafter.layers == drafter.searched.best[0]


@pytest.mark.parametrize("bad,field", [
    (dict(kept_layers=0), "kept_layers"), (dict(kept_layers=4), "kept_layers"), (dict(kept_layers="2"), "kept_layers"),
    (dict(kept_layers=2, layers=(1, 2)), "layers"), (dict(kept_layers=2, layers=(0, 4)), "layers"),
    (dict(kept_layers=3, layers=(0, 1)), "layers"), (dict(kept_layers=2, runner="vulkan"), "runner"),
])
def test_bad_values_name_the_field(pair, bad, field):
    with pytest.raises(ValueError, match="^" + field + " must be "):
        SelfDrafter(pair[0], **bad)


@pytest.mark.parametrize("runner", ["llamacpp", "onnxruntime"])
def test_a_target_on_a_whole_graph_runner_drafts_its_layers_on_eager(pair, runner):
    """llama.cpp and ONNX Runtime run a whole graph, so no layer can be left out there: the view drafts on
    eager while the target verifies on its own runner (the plain run's)."""
    assert SelfDrafter(pair[0], 2, runner=runner).runner == "eager"


@pytest.mark.parametrize("speculation", ["chain", "tree"])
def test_a_target_kept_as_its_files_drafts_through_its_pytorch_form(pair, reference, speculation):
    """The default target is a model handle (models/handle.py) verified on ONNX Runtime: the view is made of
    the PyTorch model the handle makes, never of the handle (whose class takes no config: issue 55's
    TypeError), and is kept on that model, so it dies with it when the handle lets it go."""
    from playground.models.handle import ModelHandle

    target, _, _ = pair
    ids, expected = reference
    handle = ModelHandle("tiny-target", target.config, target.generation_config, "cpu", "float32", "none",
                         lambda: target)
    drafter = SelfDrafter(handle, 2, runner="auto", speculation=speculation, tree=dict(budget=8, depth=4))
    assert output_tokens(run(handle, ids, drafter)) == expected
    assert drafter.drafter.lm.model is view_of(target, drafter.layers) and handle.loaded



@pytest.mark.parametrize("bad,field", [(dict(budget=0), "budget"), (dict(window=0), "window")])
def test_a_bad_search_names_its_field(bad, field):
    with pytest.raises(ValueError, match="^" + field + " must be "):
        LayerSearch(**bad)

# -- losslessness over two tokens of real (tiny) models ------------------------------------------

JOINT_DRAWS = 1500
PROMPT_IDS = [1, 1, 1]  # where the view's q is farthest from p (total variation 0.2 over both tokens)
KNOBS = dict(top_k=7, top_p=0.9)  # top-k and top-p on: the exact joint is the processed target's


def processed_joint(target, prompt, vocab):
    """p(t1, t2 | prompt) at temperature 1 under the run's top-k and top-p."""
    process = lambda logits: sampling.logits_to_probs(logits, sampling.Sampling(1.0, **KNOBS))
    with torch.inference_mode():
        first = process(target(torch.tensor([prompt])).logits[0, -1])
        second = process(target(torch.tensor([prompt + [t] for t in range(vocab)])).logits[:, -1])
    return (first[:, None] * second).flatten().numpy()


def joint_counts(target, draws=JOINT_DRAWS):
    """Counts of the first two tokens over `draws` seeds, a fresh searching self draft for each."""
    counts = np.zeros(8 * 8)
    for seed in range(draws):
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3, runner="eager", **KNOBS)
        out = output_tokens(generate(target, PROMPT_IDS, config, SelfDrafter(target, 1, runner="eager")))
        counts[out[0] * 8 + out[1]] += 1
    return counts


def test_two_token_joint_follows_target(small_vocab_pair):
    target, _ = small_vocab_pair  # 2 layers: the self draft runs layer 0 only
    fit = goodness_of_fit(joint_counts(target), processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value > 1e-4, fit


def test_two_token_joint_check_catches_the_naive_residual(small_vocab_pair, monkeypatch):
    """Wrong on purpose: after a rejection the target samples from p instead of norm(max(0, p - q)),
    so the drafted tokens come out too often."""
    target, _ = small_vocab_pair
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    fit = goodness_of_fit(joint_counts(target), processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value < 1e-4, fit


# -- as a token tree --------------------------------------------------------------------------------

TREE_SHAPE = dict(budget=6, depth=2, branching=2)


def test_a_self_tree_keeps_greedy_identity_and_drafts_with_the_view(pair, reference):
    target, _, _ = pair
    ids, expected = reference
    drafter = SelfDrafter(target, 2, search=LayerSearch(), runner="eager", speculation="tree",
                          tree=dict(budget=8, depth=4, branching=2))
    events = run(target, ids, drafter)
    assert output_tokens(events) == expected
    assert drafter.depth == 4 and events[1].tree is not None and summarize(events).target_calls < TOKENS
    assert drafter.drafter.lm.model is view_of(target, drafter.layers)  # the tree grows on the searched view
    with pytest.raises(ValueError, match="^speculation must be one of"):
        SelfDrafter(target, 2, speculation="forest")


def tree_joint_counts(target, draws=JOINT_DRAWS):
    counts = np.zeros(8 * 8)
    for seed in range(draws):
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3, runner="eager", **KNOBS)
        drafter = SelfDrafter(target, 1, runner="eager", speculation="tree", tree=TREE_SHAPE)
        out = output_tokens(generate(target, PROMPT_IDS, config, drafter))
        counts[out[0] * 8 + out[1]] += 1
    return counts


def test_two_token_joint_of_a_self_tree_follows_target(small_vocab_pair):
    target, _ = small_vocab_pair
    fit = goodness_of_fit(tree_joint_counts(target), processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value > 1e-4, fit


def test_two_token_joint_check_of_a_self_tree_catches_a_shared_q_rule(small_vocab_pair, monkeypatch):
    """Wrong on purpose: every child tried against one q uniform over the siblings, not the q they
    were drawn from (SpecInfer's rule needs the drawing q)."""
    from playground.engine import tree as tree_math
    from test_suffix import shared_q_try_children

    target, _ = small_vocab_pair
    monkeypatch.setattr(tree_math, "try_children", shared_q_try_children)
    fit = goodness_of_fit(tree_joint_counts(target), processed_joint(target, PROMPT_IDS, 8))
    assert fit.p_value < 1e-4, fit
