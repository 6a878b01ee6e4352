"""The engine on tiny random models built in-process: greedy identity, KV rollback, edges, bad input,
and losslessness over two steps of real (tiny) models."""

import copy

import numpy as np
import pytest
import torch

from playground.engine import sampling
from playground.engine.drafters import ModelDrafter, PromptLookupDrafter, find_previous_ngram
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import BONUS, REJECTED, RESAMPLED, TARGET, output_tokens, summarize
from playground.engine.kvcache import CachedModel
from playground.measure.teach.stats import goodness_of_fit
from playground.models.text import check_same_tokenizer, encode_prompt
from playground.models.tiny import byte_tokenizer

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"


def ids_of(tokenizer, text=PROMPT):
    return encode_prompt(tokenizer, text)


def run(target, ids, drafter=None, **knobs):
    return list(generate(target, ids, SpecConfig(**knobs), drafter))


def hf_greedy(model, ids, n):
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def greedy_reference(pair):
    target, _, tokenizer = pair
    ids = ids_of(tokenizer)
    return ids, hf_greedy(target, ids, 48)


def test_baseline_equals_transformers_generate(pair, greedy_reference):
    target, _, _ = pair
    ids, reference = greedy_reference
    events = run(target, ids, max_new_tokens=48)
    assert output_tokens(events) == reference
    assert all(e.next_fate == TARGET and not e.drafts for e in events)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ["draft", "same-as-target", "prompt-lookup"])
def test_greedy_speculative_equals_greedy_target(pair, greedy_reference, gamma, kind):
    target, draft, _ = pair
    drafter = {"draft": lambda: ModelDrafter(draft), "same-as-target": lambda: ModelDrafter(target),
               "prompt-lookup": lambda: PromptLookupDrafter(1, 3)}[kind]()
    ids, reference = greedy_reference
    events = run(target, ids, drafter, gamma=gamma, max_new_tokens=48)
    assert output_tokens(events) == reference
    m = summarize(events)
    assert m.drafted > 0
    if kind == "same-as-target":
        assert m.accepted == m.drafted  # a draft identical to the target is never wrong
    if kind == "draft":
        assert m.target_calls < 48  # speculation did save target calls


def test_adaptive_and_confidence_cut_keep_greedy_identity(pair, greedy_reference):
    target, draft, _ = pair
    ids, reference = greedy_reference
    events = run(target, ids, ModelDrafter(draft), gamma=2, adaptive=True, gamma_min=1, gamma_max=10,
                 max_new_tokens=48)
    assert output_tokens(events) == reference
    assert len({e.gamma for e in events}) > 1  # the schedule did move
    cut = run(target, ids, ModelDrafter(draft), gamma=8, min_confidence=0.9, max_new_tokens=48)
    assert output_tokens(cut) == reference
    assert summarize(cut).mean_gamma < 8


def test_kv_rollback_matches_full_recompute(pair):
    target, _, tokenizer = pair
    ids = ids_of(tokenizer)
    lm = CachedModel(target)
    lm.feed(ids[:-1], keep=1)
    lm.logits_for(ids + [5, 6, 7, 8], keep=5)  # verify a 4-token draft
    lm.rollback(len(ids) + 1)  # one accepted, the rest rejected
    assert lm.cache.get_seq_length() == len(lm.tokens) == len(ids) + 1
    context = ids + [5, 99]  # accepted 5, then the resampled 99
    rolled_back = lm.logits_for(context, keep=1)[-1]
    with torch.inference_mode():
        fresh = target(torch.tensor([context])).logits[0, -1]
    torch.testing.assert_close(rolled_back, fresh, atol=1e-5, rtol=1e-5)


def test_engine_caches_track_their_tokens(pair):
    """After each event the target cache holds exactly the context minus the pending token."""
    target, draft, tokenizer = pair
    ids = ids_of(tokenizer)
    drafter = ModelDrafter(draft)
    seen = []
    for event in generate(target, ids, SpecConfig(gamma=4, max_new_tokens=20, temperature=1.0, seed=2), drafter):
        seen.extend(event.emitted)
        assert drafter.lm.cache.get_seq_length() == len(drafter.lm.tokens)
    assert len(seen) == 20


def test_events_describe_the_step(pair):
    target, draft, tokenizer = pair
    runs = [run(target, ids_of(tokenizer), ModelDrafter(draft), gamma=4, max_new_tokens=40,
                temperature=1.0, seed=seed, detail=5) for seed in range(1, 4)]  # a few seeds: both fates occur
    fates = {e.next_fate for events in runs for e in events}
    assert {BONUS, RESAMPLED} <= fates
    for e in (e for events in runs for e in events):
        assert len(e.emitted) <= e.n_accepted + 1
        assert e.draft_s > 0 and e.verify_s > 0 and e.overhead_s >= 0
        for i, d in enumerate(e.drafts):
            assert 0 <= d.q <= 1 and 0 <= d.p <= 1
            assert d.accept_prob == pytest.approx(min(1.0, d.p / d.q), rel=1e-5)
            assert (i < e.n_accepted) == (d.fate != REJECTED)
            assert len(d.top_q) == len(d.top_p) == 5
            if i <= e.n_accepted:  # tested positions show the uniform drawn
                assert d.uniform is not None and (d.uniform < d.accept_prob) == (i < e.n_accepted)
        if e.next_fate == RESAMPLED:
            assert e.residual_top and e.residual_top[0][1] > 0
    events = runs[0]
    assert events[0].prompt_tokens == len(ids_of(tokenizer)) and all(e.prompt_tokens == 0 for e in events[1:])


def test_same_seed_same_text_and_seed_matters(pair):
    target, draft, tokenizer = pair
    ids = ids_of(tokenizer)
    a = output_tokens(run(target, ids, ModelDrafter(draft), temperature=1.0, seed=7, max_new_tokens=30))
    b = output_tokens(run(target, ids, ModelDrafter(draft), temperature=1.0, seed=7, max_new_tokens=30))
    c = output_tokens(run(target, ids, ModelDrafter(draft), temperature=1.0, seed=8, max_new_tokens=30))
    assert a == b and a != c


# -- edges ------------------------------------------------------------------------------------


def test_one_new_token(pair, greedy_reference):
    target, draft, _ = pair
    ids, reference = greedy_reference
    events = run(target, ids, ModelDrafter(draft), gamma=8, max_new_tokens=1)
    assert output_tokens(events) == reference[:1] and events[-1].finish == "length"
    assert not events[0].drafts  # nothing drafted past the budget


@pytest.mark.parametrize("budget", [2, 5, 9])
def test_draft_never_runs_past_the_budget(pair, greedy_reference, budget):
    target, draft, _ = pair
    ids, reference = greedy_reference
    events = run(target, ids, ModelDrafter(target), gamma=8, max_new_tokens=budget)
    assert output_tokens(events) == reference[:budget]
    assert sum(len(e.drafts) for e in events) <= budget - 1


def test_eos_inside_a_draft_stops_there(pair, greedy_reference):
    target, _, _ = pair
    ids, reference = greedy_reference
    eos = reference[5]
    stop_at = reference.index(eos)
    events = list(generate(target, ids, SpecConfig(gamma=8, max_new_tokens=48), ModelDrafter(target),
                           eos_token_ids=[eos]))
    assert output_tokens(events) == reference[: stop_at + 1]
    assert events[-1].finish == "eos" and len(events[-1].drafts) > len(events[-1].emitted) - 1


def test_stop_string(pair):
    target, draft, tokenizer = pair
    ids = ids_of(tokenizer)
    text = tokenizer.decode(output_tokens(run(target, ids, max_new_tokens=40)))
    stop = text[10:13]
    events = list(generate(target, ids, SpecConfig(gamma=4, max_new_tokens=40, stop_strings=[stop]),
                           ModelDrafter(draft), tokenizer=tokenizer))
    out = tokenizer.decode(output_tokens(events))
    assert events[-1].finish == "stop" and out.endswith(stop) and stop not in out[:-1]


def test_one_token_prompt(pair):
    target, draft, _ = pair
    reference = hf_greedy(target, [65], 20)
    assert output_tokens(run(target, [65], ModelDrafter(draft), gamma=4, max_new_tokens=20)) == reference


@pytest.mark.parametrize("knobs", [dict(temperature=1.0, top_k=1), dict(temperature=0.8, top_p=1e-6)])
def test_top_k_one_and_tiny_top_p_are_greedy(pair, greedy_reference, knobs):
    target, draft, _ = pair
    ids, reference = greedy_reference
    events = run(target, ids, ModelDrafter(draft), gamma=4, max_new_tokens=48, seed=3, **knobs)
    assert output_tokens(events) == reference


def test_prompt_lookup_finds_latest_ngram():
    ids = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    assert find_previous_ngram(ids, 3) == 7  # the later "1 2 3" was followed by 7
    assert find_previous_ngram([1, 2, 3], 2) is None
    draft = PromptLookupDrafter(1, 3).propose(ids, 2, None, None)
    assert draft.tokens == [7, 5] and draft.q is None


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad,name", [
    (dict(gamma=0), "gamma"), (dict(gamma=1000), "gamma"), (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.01), "top_p"), (dict(top_k=-3), "top_k"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(gamma_min=4, gamma_max=2), "gamma_max"),
    (dict(min_confidence=1.5), "min_confidence"), (dict(gamma="4"), "gamma"),
])
def test_bad_knobs_name_the_parameter_and_range(bad, name):
    with pytest.raises(ValueError, match=rf"{name} must be .*(\[|\().*\]|{name} must be an integer"):
        SpecConfig(**bad)


def test_empty_prompt_and_overlong_requests(pair):
    target, draft, _ = pair
    with pytest.raises(ValueError, match="prompt must contain at least one token"):
        run(target, [], ModelDrafter(draft))
    with pytest.raises(ValueError, match="prompt is 2048 tokens"):
        run(target, [65] * 2048)
    with pytest.raises(ValueError, match="max_new_tokens must be at most 48"):
        run(target, [65] * 2000, max_new_tokens=100)
    with pytest.raises(ValueError, match="prompt must be non-empty"):
        encode_prompt(pair[2], "  ")


def test_different_tokenizers_are_refused():
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    other = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, "<unk>")))
    with pytest.raises(ValueError, match="target and draft tokenizers differ: vocabularies differ"):
        check_same_tokenizer(byte_tokenizer(), other)
    check_same_tokenizer(byte_tokenizer(), byte_tokenizer())  # equal but distinct objects pass


# -- losslessness over two steps of real models ------------------------------------------------

JOINT_DRAWS = 3000


def exact_joint(target, prompt, vocab):
    """p(t1, t2 | prompt) from the target's own forward passes, temperature 1."""
    with torch.inference_mode():
        first = target(torch.tensor([prompt])).logits[0, -1].softmax(-1)
        batch = torch.tensor([prompt + [t] for t in range(vocab)])
        second = target(batch).logits[:, -1].softmax(-1)
    return (first[:, None] * second).flatten().numpy()


def joint_counts(target, draft, prompt, vocab, draws, draft_vocab=None, make_drafter=None):
    """Counts of the first two tokens over `draws` seeds at temperature 1; each draw gets a fresh
    drafter from make_drafter() (default: a chain ModelDrafter over `draft`)."""
    make_drafter = make_drafter or (lambda: ModelDrafter(draft, draft_vocab=draft_vocab))
    counts = np.zeros(vocab * vocab)
    for seed in range(draws):
        config = SpecConfig(gamma=2, temperature=1.0, seed=seed, max_new_tokens=3)
        out = output_tokens(generate(target, prompt, config, make_drafter()))
        counts[out[0] * vocab + out[1]] += 1
    return counts


def test_two_token_joint_follows_target(small_vocab_pair):
    target, draft = small_vocab_pair
    prompt = [1, 5, 2]
    fit = goodness_of_fit(joint_counts(target, draft, prompt, 8, JOINT_DRAWS), exact_joint(target, prompt, 8))
    assert fit.p_value > 1e-4, fit


@pytest.mark.parametrize("draft_vocab", [None, 5])
def test_two_token_joint_check_catches_a_wrong_rule(small_vocab_pair, monkeypatch, draft_vocab):
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    target, draft = small_vocab_pair
    prompt = [1, 5, 2]
    counts = joint_counts(target, draft, prompt, 8, JOINT_DRAWS, draft_vocab)
    fit = goodness_of_fit(counts, exact_joint(target, prompt, 8))
    assert fit.p_value < 1e-4, fit


def test_two_token_joint_follows_target_with_a_trimmed_draft_vocabulary(small_vocab_pair):
    """q = 0 for tokens 5-7, which the target gives mass: only the residual can emit them."""
    target, draft = small_vocab_pair
    prompt = [1, 5, 2]
    counts = joint_counts(target, draft, prompt, 8, JOINT_DRAWS, draft_vocab=5)
    fit = goodness_of_fit(counts, exact_joint(target, prompt, 8))
    assert fit.p_value > 1e-4, fit
    # about 11% of the exact joint has a token the draft cannot propose: those are emitted too
    assert JOINT_DRAWS - counts.reshape(8, 8)[:5, :5].sum() > 0.05 * JOINT_DRAWS


@pytest.mark.parametrize("draft_vocab", [40, 120])
def test_trimmed_draft_vocabulary_keeps_greedy_identity(pair, greedy_reference, draft_vocab):
    target, draft, _ = pair
    ids, reference = greedy_reference
    drafter = ModelDrafter(draft, draft_vocab=draft_vocab)
    assert output_tokens(run(target, ids, drafter, gamma=4, max_new_tokens=48)) == reference
    proposal = ModelDrafter(draft, draft_vocab=draft_vocab).propose(ids, 3, SpecConfig(temperature=1.0).sampling,
                                                                     torch.Generator().manual_seed(0))
    assert max(proposal.tokens) < draft_vocab and float(proposal.q[:, draft_vocab:].sum()) == 0.0
    assert float(proposal.q[:, :draft_vocab].sum()) == pytest.approx(len(proposal.tokens), rel=1e-5)


def test_draft_vocabulary_out_of_range_or_on_a_transformed_head_is_refused(pair):
    _, draft, _ = pair
    with pytest.raises(ValueError, match=r"draft_vocab must be in \[1, "):
        ModelDrafter(draft, draft_vocab=0)
    capped = copy.deepcopy(draft)
    capped.lm_head.bias = torch.nn.Parameter(torch.ones(capped.lm_head.weight.shape[0]))
    with pytest.raises(ValueError, match="plain linear layer"):
        ModelDrafter(capped, draft_vocab=50)


def test_token_pieces_rebuild_the_text_even_when_tokens_split_characters():
    from playground.models.text import TokenPieces

    tokenizer = byte_tokenizer()
    text = "naïve café — 日本語 ✓\n  indented <tag>"
    ids = tokenizer(text)["input_ids"]
    pieces = TokenPieces(tokenizer)
    out = [pieces.add(t) for t in ids]
    assert "".join(out) == text
    assert "" in out  # multi-byte characters arrive in several tokens; the first ones add nothing yet


def test_no_separate_prefill_forward(pair):
    """The first target call reads the prompt together with the first draft: a baseline of n
    tokens costs exactly n target forwards, and a speculative run one forward per event."""
    target, draft, tokenizer = pair
    ids = ids_of(tokenizer)
    widths = []
    handle = target.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]),
                                              with_kwargs=True)
    try:
        assert len(run(target, ids, max_new_tokens=10)) == len(widths) == 10
        assert widths[0] == len(ids) and set(widths[1:]) == {1}
        widths.clear()
        events = run(target, ids, ModelDrafter(draft), gamma=4, max_new_tokens=20)
        assert len(widths) == len(events) and widths[0] == len(ids) + len(events[0].drafts)
    finally:
        handle.remove()


def test_drafting_stops_at_an_end_of_turn_token(pair, greedy_reference):
    """Nothing after EOS can be emitted, so drafting past it only wastes draft forwards."""
    target, _, _ = pair
    ids, reference = greedy_reference
    eos = reference[3]
    drafter = ModelDrafter(target)  # drafts exactly the target's greedy tokens
    draft = drafter.propose(ids, 8, SpecConfig().sampling, None, stop_tokens=frozenset([eos]))
    assert draft.tokens == reference[: reference.index(eos) + 1]
    assert PromptLookupDrafter(1, 2).propose([5, 6, 7, 9, 5, 6], 4, None, None, stop_tokens={7}).tokens == [7]


def test_a_chains_first_draft_forward_reads_two_rows_exactly_after_an_all_accepted_call(pair, greedy_reference):
    """What sampling.draft_cost's catch-up stands on: the draft's first forward of a call reads the call
    before's last drafted token and the new one (two rows) when that call accepted all γ, one row otherwise."""
    target, draft, _ = pair
    ids, _ = greedy_reference
    for gamma in (1, 3):
        drafter = ModelDrafter(draft)
        fed, feed = [], drafter.lm.feed
        drafter.lm.feed = lambda new, keep: fed.append(len(new)) or feed(new, keep)
        calls, rows = [], []
        for event in generate(target, ids, SpecConfig(gamma=gamma, max_new_tokens=40), drafter):
            rows.append(fed[0] if fed else None)
            assert all(n == 1 for n in fed[1:]), fed  # the other forwards read the token drafted before
            calls.append(event)
            fed.clear()
        drafted = [i for i in range(1, len(calls)) if calls[i].drafts]  # the last call may have no room to draft
        after_all = [calls[i - 1].n_accepted == len(calls[i - 1].drafts) for i in drafted]
        assert [rows[i] for i in drafted] == [2 if full else 1 for full in after_all]
        assert 0 < sum(after_all) < len(after_all)  # both cases met
