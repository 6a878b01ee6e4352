"""A draft model with another tokenizer: the vocabulary intersection, the text kept in step across
two tokenizations, greedy identity, and losslessness of drafting among shared tokens."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from playground.engine import universal
from playground.engine.events import output_tokens
from playground.engine.generate import SpecConfig, generate
from playground.engine.universal import Retokenized, UniversalDrafter, continue_in
from playground.engine.vocab_map import build_vocab_map, byte_level_bytes, sentencepiece_bytes
from playground.measure.teach.stats import goodness_of_fit
from playground.models.tiny import byte_tokenizer, tiny_model

from test_engine import hf_greedy

# The same four characters, split differently: the target merges "ab" and "ca", the draft "dd"
# and "ab"; ids are numbered differently; "<|end|>" is shared, each has one special of its own.
TARGET_VOCAB = {"a": 0, "b": 1, "c": 2, "d": 3, "ab": 4, "ca": 5, "<|end|>": 6, "<|pad|>": 7}
DRAFT_VOCAB = {"d": 0, "c": 1, "b": 2, "a": 3, "dd": 4, "ab": 5, "<|end|>": 6, "<|sep|>": 7}


def bpe_tokenizer(vocab, merges, specials):
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.decoder = decoders.Fuse()  # pieces join without spaces
    core.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|end|>")


@pytest.fixture(scope="module")
def tokenizers():
    target = bpe_tokenizer(TARGET_VOCAB, [("a", "b"), ("c", "a")], ["<|end|>", "<|pad|>"])
    draft = bpe_tokenizer(DRAFT_VOCAB, [("d", "d"), ("a", "b")], ["<|end|>", "<|sep|>"])
    return target, draft


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# -- the vocabulary intersection ---------------------------------------------------------------


def test_shared_tokens_map_and_merge_only_tokens_do_not(tokenizers):
    target, draft = tokenizers
    vocab_map = build_vocab_map(target, draft)
    pairs = dict(zip(vocab_map.draft_ids.tolist(), vocab_map.target_ids.tolist()))
    assert pairs == {0: 3, 1: 2, 2: 1, 3: 0, 5: 4, 6: 6}  # d c b a ab <|end|>
    assert vocab_map.draft_to_target[4] == -1 and vocab_map.draft_to_target[7] == -1  # "dd", <|sep|>
    assert 5 not in pairs.values() and vocab_map.coverage == pytest.approx(6 / 8)  # "ca" is out of reach


def test_identical_tokenizers_map_fully():
    vocab_map = build_vocab_map(byte_tokenizer(), byte_tokenizer())
    assert vocab_map.coverage == 1.0 and len(vocab_map) == 259
    assert torch.equal(vocab_map.draft_ids, vocab_map.target_ids)


def test_disjoint_vocabularies_are_refused_naming_the_draft():
    x = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0, "y": 1}, "y")))
    z = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"z": 0, "w": 1}, "w")))
    with pytest.raises(ValueError, match=r"^draft: .*intersection .* is empty"):
        build_vocab_map(x, z)


def test_byte_markers_read_as_bytes():
    assert byte_level_bytes("\u0120the") == b" the" and byte_level_bytes("\u010a") == b"\n"  # "Ġthe", "Ċ"
    assert sentencepiece_bytes("\u2581the") == b" the" and sentencepiece_bytes("<0x0A>") == b"\n"


def test_same_tokenizer_is_refused():
    model = tiny_model(259, 1, seed=0)
    with pytest.raises(ValueError, match="^draft: .*ModelDrafter"):
        UniversalDrafter(model, byte_tokenizer(), byte_tokenizer(), 259)


# -- text across tokenizations -----------------------------------------------------------------


@pytest.mark.parametrize("lookbehind, expected", [(0, ["a", "d", "d"]), (1, ["a", "dd"])])
def test_lookbehind_redoes_a_merge_across_the_boundary(tokenizers, lookbehind, expected):
    """The target writes "ad", then "d": only a re-encoded look-behind lets the draft read "dd"."""
    target, draft = tokenizers
    context = Retokenized(target, draft, lookbehind)
    assert context.update(ids(target, "ad")) == ids(draft, "ad")
    tokens = context.update(ids(target, "ad") + ids(target, "d"))
    assert draft.convert_ids_to_tokens(tokens) == expected
    assert context.text == "add"


def test_a_changed_context_is_reread_from_where_it_differs(tokenizers):
    target, draft = tokenizers
    context = Retokenized(target, draft, lookbehind=1)
    context.update(ids(target, "dcabd"))
    assert context.update(ids(target, "dcadd")) == ids(draft, "dcadd") and context.text == "dcadd"
    assert context.update(ids(target, "dc")) == ids(draft, "dc") and context.text == "dc"


@pytest.mark.parametrize("context_text, new, expected", [
    ("c", "ab", ["ab"]),  # the window "c" re-encodes as itself: the new text's own merge holds
    ("a", "b", ["b"]),  # "a" + "b" would merge into "ab": the context's "a" stands, "b" follows it
    ("dc", "ad", ["a", "d"]),  # "c" + "a" would merge into "ca"
])
def test_new_text_continues_the_target_context(tokenizers, context_text, new, expected):
    target, draft = tokenizers
    context = Retokenized(target, draft)
    target_ids = ids(target, context_text)
    context.update(target_ids)
    tokens = continue_in(target, target_ids, context.target_marks, context.text, new)
    assert target.convert_ids_to_tokens(tokens) == expected


# -- greedy: identical to the target's own output --------------------------------------------


def mapped_copy(target, draft_tokenizer, target_tokenizer):
    """A draft with the target's layers whose embeddings and head rows are the target's for each
    shared token (zero for the draft's own): it agrees with the target wherever both read the
    context the same way, so drafts are accepted often."""
    vocab_map = build_vocab_map(target_tokenizer, draft_tokenizer)
    draft = tiny_model(len(draft_tokenizer), target.config.num_hidden_layers, seed=99)
    state = {k: v for k, v in target.state_dict().items() if "embed_tokens" not in k and "lm_head" not in k}
    draft.load_state_dict(state, strict=False)
    with torch.no_grad():
        for layer in (draft.model.embed_tokens, draft.lm_head):
            layer.weight.zero_()
        draft.model.embed_tokens.weight[vocab_map.draft_ids] = target.model.embed_tokens.weight[vocab_map.target_ids]
        draft.lm_head.weight[vocab_map.draft_ids] = target.lm_head.weight[vocab_map.target_ids]
    return draft


@pytest.fixture(scope="module")
def greedy_case(tokenizers):
    target_tokenizer, draft_tokenizer = tokenizers
    target = tiny_model(8, 2, seed=3, logit_scale=1.0)
    prompt = ids(target_tokenizer, "abcadcabd")
    return target, prompt, hf_greedy(target, prompt, 40)


@pytest.mark.parametrize("gamma", [1, 4])
@pytest.mark.parametrize("draft_kind", ["mapped copy", "independent"])
def test_greedy_output_is_the_targets_own(tokenizers, greedy_case, gamma, draft_kind):
    target_tokenizer, draft_tokenizer = tokenizers
    target, prompt, reference = greedy_case
    draft = (mapped_copy(target, draft_tokenizer, target_tokenizer) if draft_kind == "mapped copy"
             else tiny_model(8, 1, seed=5))
    drafter = UniversalDrafter(draft, draft_tokenizer, target_tokenizer, 8)
    events = list(generate(target, prompt, SpecConfig(gamma=gamma, max_new_tokens=40), drafter))
    assert output_tokens(events) == reference
    assert sum(len(e.drafts) for e in events) > 0
    if draft_kind == "mapped copy":  # drafts really are accepted, several in a row
        assert sum(e.n_accepted for e in events) >= 10
        assert gamma == 1 or max(e.n_accepted for e in events) >= 2


# -- sampled: the target's distribution exactly -----------------------------------------------

JOINT_DRAWS = 500
BROKEN_DRAWS = 200  # the broken rules below move the joint far: p < 1e-7 at 200 draws
PROMPT = [1, 5, 2]  # "b" "ca" "c": the draft reads "bcac" as b c a c


def favouring_its_own_tokens(draft, bias: float):
    """The draft's head with `bias` added to the logits of "dd" and <|sep|>, tokens the target
    lacks: most of q sits outside the intersection, so its renormalisation matters."""
    head = torch.nn.Linear(draft.lm_head.in_features, draft.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(draft.lm_head.weight)
        head.bias.zero_()
        head.bias[[4, 7]] = bias
    draft.lm_head = head
    return draft


@pytest.fixture(scope="module")
def sampled_case(tokenizers):
    target_tokenizer, draft_tokenizer = tokenizers
    target = tiny_model(8, 2, seed=21, logit_scale=0.1)
    draft = favouring_its_own_tokens(tiny_model(8, 1, seed=22, logit_scale=0.25), 3.0)
    return target, draft, build_vocab_map(target_tokenizer, draft_tokenizer, 8, 8)


def exact_joint(target, prompt, vocab):
    """p(t1, t2 | prompt) from the target's own forward passes, temperature 1."""
    with torch.inference_mode():
        first = target(torch.tensor([prompt])).logits[0, -1].softmax(-1)
        second = target(torch.tensor([prompt + [t] for t in range(vocab)])).logits[:, -1].softmax(-1)
    return (first[:, None] * second).flatten().numpy()


def joint_counts(tokenizers, case, draws=JOINT_DRAWS):
    target_tokenizer, draft_tokenizer = tokenizers
    target, draft, vocab_map = case
    counts, accepted = np.zeros(64), 0
    for seed in range(draws):
        drafter = UniversalDrafter(draft, draft_tokenizer, target_tokenizer, 8, vocab_map=vocab_map, runner="eager")
        events = list(generate(target, PROMPT, SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3),
                               drafter))
        out = output_tokens(events)
        counts[out[0] * 8 + out[1]] += 1
        accepted += sum(e.n_accepted for e in events)
    return counts, accepted


def test_sampled_proposals_are_shared_tokens_with_q_in_the_targets_vocabulary(tokenizers, sampled_case):
    target_tokenizer, draft_tokenizer = tokenizers
    _, draft, vocab_map = sampled_case
    drafter = UniversalDrafter(draft, draft_tokenizer, target_tokenizer, 8, vocab_map=vocab_map)
    proposal = drafter.propose(PROMPT, 4, SpecConfig(temperature=1.0).sampling, torch.Generator().manual_seed(0))
    assert proposal.q.shape == (len(proposal.tokens), 8)
    assert torch.allclose(proposal.q.sum(-1), torch.ones(len(proposal.tokens)))
    assert float(proposal.q[:, [5, 7]].sum()) == 0.0  # "ca" and <|pad|>: no draft token is either
    assert all(proposal.q[i, t] > 0 for i, t in enumerate(proposal.tokens))


def test_sampled_two_token_joint_follows_the_target(tokenizers, sampled_case):
    counts, accepted = joint_counts(tokenizers, sampled_case)
    fit = goodness_of_fit(counts, exact_joint(sampled_case[0], PROMPT, 8))
    assert fit.p_value > 1e-4, fit
    assert accepted > 0.3 * JOINT_DRAWS  # the draft's tokens are really used
    assert counts.reshape(8, 8)[:, 5].sum() > 0  # "ca", which the draft cannot reach, still comes out


def unnormalised(q, vocab_map):
    kept = torch.zeros_like(q)
    kept[vocab_map.draft_ids] = q[vocab_map.draft_ids]
    return kept  # drawn from as if normalised, but reported as the smaller mass it is


def mapped_to_a_neighbour(vocab_map, draft_token):
    token = int(vocab_map.draft_to_target[draft_token])
    return {0: 1, 1: 2, 2: 3, 3: 0}.get(token, token)  # a -> b -> c -> d -> a for the token, not for q


@pytest.mark.parametrize("name, broken", [("restrict_to_intersection", unnormalised),
                                          ("target_token", mapped_to_a_neighbour)])
def test_the_joint_check_catches_a_broken_rule(tokenizers, sampled_case, monkeypatch, name, broken):
    monkeypatch.setattr(universal, name, broken)
    counts, _ = joint_counts(tokenizers, sampled_case, BROKEN_DRAWS)
    fit = goodness_of_fit(counts, exact_joint(sampled_case[0], PROMPT, 8))
    assert fit.p_value < 1e-4, fit


@pytest.mark.parametrize("changes, message", [
    ({"draft_vocab": 64}, "draft_vocab must be 0 for a draft with another tokenizer"),
    ({"speculation": "tree"}, "speculation must be 'chain' for a draft with another tokenizer"),
])
def test_what_a_draft_of_another_tokenizer_cannot_do_is_said_before_anything_is_built(tokenizers, monkeypatch,
                                                                                     changes, message):
    """factory.check_models runs in the page's warm-up before any build (issue 55: the default pair's cut
    head reached SmolLM2's ONNX build and failed there), and again in the drafter."""
    from types import SimpleNamespace

    from playground.app.shared import flow
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.runners import warmup

    target, draft = tiny_model(259, 1, seed=1), tiny_model(259, 1, seed=2)
    run = RunConfig(pair="tiny", **changes)
    models = factory.Models(target, draft, byte_tokenizer(), tokenizers[0])
    with pytest.raises(ValueError, match="^" + message):
        factory.check_models(run, models)
    with pytest.raises(ValueError, match="^" + message):
        factory.make_drafter(run, models)
    factory.check_models(RunConfig(pair="tiny"), models)  # a whole chain: fine
    factory.check_models(run, factory.Models(target, draft, byte_tokenizer(), None))  # one tokenizer: fine
    monkeypatch.setattr(warmup, "warm_up", lambda *a, **k: pytest.fail("built before the check"))
    side = SimpleNamespace(model=draft, tokenizer=tokenizers[0])
    pair = SimpleNamespace(target=SimpleNamespace(model=target), draft=side, tokenizer=byte_tokenizer(),
                           same_tokenizer=False)
    with pytest.raises(ValueError, match="^" + message):
        list(flow.compiling(pair, run, status=None))
