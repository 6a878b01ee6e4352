"""What a step's proposal pays (engine/payoff.py) and the hybrid's choices from it (engine/hybrid.py):
a long, trusted match speculates past γ, a weak one-token match loses to the draft model, a plain
step wins where nothing pays, and α is read back from the context each proposal left."""

import pytest

from playground.config import CHAIN
from playground.engine.drafters import Draft
from playground.engine.hybrid import HybridDrafter
from playground.engine.payoff import (MODEL, NONE, SUFFIX, Acceptance, Timings, best, choices, match_class)
from playground.engine.sampling import Sampling
from playground.engine.suffix import SuffixDrafter

GREEDY = Sampling(0.0, 0, 1.0)


def measured(slope=0.1, model_row=0.3) -> Timings:
    """Verification at 1 + slope per extra row, the draft model's one-row forward at model_row (plain steps)."""
    timings = Timings(model_row=model_row)
    for rows in (1, 2, 5):
        timings.add_verify(rows, 1 + slope * (rows - 1))
    return timings


def test_a_long_trusted_match_speculates_past_gamma():
    choice = best(choices(measured(), suffix_alpha=0.9, suffix_length=12, model_alpha=0.8, model_length=1))
    assert choice.source == SUFFIX and choice.length > 1


def test_a_weak_one_token_match_loses_to_the_draft_model():
    choice = best(choices(measured(), suffix_alpha=0.2, suffix_length=1, model_alpha=0.8, model_length=3))
    assert choice.source == MODEL


def test_a_plain_step_where_no_draft_pays():
    choice = best(choices(measured(slope=0.6, model_row=0.9), suffix_alpha=0.1, suffix_length=4,
                          model_alpha=0.3, model_length=3))
    assert choice.source == NONE and choice.length == 0 and "plain step" in choice.why()


def test_a_match_the_draft_model_would_beat_once_its_reading_is_paid_goes_to_the_draft_model():
    """The default pair's shape (a row 0.27 of a step, the draft's forward 0.39, its α 0.88) against a
    one-token match at α 0.45: counting only the verification, the suffixes' step looks the better buy
    (1.45 tokens for 1.27 steps against 1.88 for 1.66). But the draft model reads every token the suffixes
    emit in its next forward, and after an all-accepted draft of its own it reads two rows: with both
    paid the draft model drafts."""
    timings = measured(slope=0.27, model_row=0.39)
    options = choices(timings, suffix_alpha=0.45, suffix_length=1, model_alpha=0.88, model_length=1, behind=2)
    suffix, model = (next(o for o in options if o.source == s) for s in (SUFFIX, MODEL))
    assert suffix.tokens / 1.27 > model.tokens / (0.39 + 1.27)  # the step alone
    assert suffix.seconds == pytest.approx(1.27 + 1.45 * 0.27 * 0.39)
    assert model.seconds == pytest.approx(0.39 * (1 + 0.88 * 0.27) + 1.27)
    assert best(options).source == MODEL


def test_the_draft_models_forward_is_learned_from_calls_reading_any_number_of_rows():
    """A call that read three rows and drafted two costs two one-row forwards and two extra rows; the
    hybrid counts the rows its draft model has not read: what its cache does not share with the context."""
    timings = measured(slope=0.25, model_row=None)
    timings.add_model(2, 3, 0.4 * (2 + 0.25 * 2))
    assert timings.model_row == pytest.approx(0.4)
    model = Scripted([7, 8, 9])
    drafter = HybridDrafter(SuffixDrafter(CHAIN, max_spec=16), model, clock=iter(range(10**6)).__next__)
    context = [1, 2, 3, 4]
    drafter.begin(context)
    assert drafter.unread(context) == 4  # the prompt
    drafter.model_proposal(context, 3, GREEDY, None, 0.0, frozenset())
    assert drafter.unread(context + [7, 8, 9, 5]) == 2  # it read 7 and 8 while drafting: 9 and the bonus
    assert drafter.unread(context + [7, 6]) == 1  # 8 was rejected: its entry is rolled back


def test_unmeasured_rows_follow_the_line_through_the_measured_ones():
    timings = measured(slope=0.2)
    assert timings.verify_s(9) == pytest.approx(1 + 0.2 * 8)
    alone = Timings()
    alone.add_verify(3, 2.0)  # one row count: the prior slope from it
    assert alone.verify_s(3) == 2.0 and alone.verify_s(5) > 2.0 > alone.verify_s(1)


def test_acceptance_counts_tested_positions_from_a_prior():
    alpha = Acceptance(prior=0.5)
    assert alpha.alpha == 0.5
    alpha.add(3, 3)  # a full acceptance: nothing rejected
    alpha.add(1, 4)  # one kept, the second rejected (the rest never tested)
    assert alpha.tested == 5 and alpha.alpha == pytest.approx((4 + 1) / (5 + 2))
    assert [match_class(n) for n in (1, 2, 3, 4, 8, 40)] == [0, 1, 1, 2, 3, 4]


class Scripted:
    """A draft model that proposes fixed tokens and counts its calls."""

    speculation, vocab_size, device = CHAIN, None, None

    def __init__(self, tokens):
        self.tokens, self.calls = tokens, 0

    def begin(self, ids):
        pass

    def propose(self, ids, k, *args) -> Draft:
        self.calls += 1
        return Draft(self.tokens[:k], None)


def test_the_hybrid_reads_each_verdict_from_the_context_and_learns_per_source():
    """The text repeats a 10-token span: the suffixes match it and draft far past γ 2 once their
    α is trusted; the draft model's α falls with every rejection the context shows."""
    span = list(range(10, 20))
    suffixes = SuffixDrafter(CHAIN, max_spec=16)
    model = Scripted([99, 98])  # never what the text does
    drafter = HybridDrafter(suffixes, model, clock=iter(range(10**6)).__next__)
    context = [1, 2, *span, 3, 4, *span[:6]]
    drafter.begin(context)
    first = drafter.propose(context, 2, GREEDY, None)
    assert first.source == SUFFIX and first.tokens == span[6:6 + len(first.tokens)]
    assert "match" in first.why
    drafter.observe([context[-1], *first.tokens], None)
    context += first.tokens + [5]  # every draft accepted, then the target's bonus token
    drafter.propose(context, 2, GREEDY, None)
    trusted = drafter.alphas[(SUFFIX, match_class(6))]
    assert trusted.accepted == len(first.tokens) and trusted.tested == len(first.tokens)


def test_a_compiled_target_holds_the_hybrid_to_the_steps_recorded_before_the_run():
    """Past γ only as far as the widest compiled step already recorded (a wider one would compile inside
    the timed step), never past the tokens left; a drafter with no reach keeps to γ."""
    from types import SimpleNamespace

    from playground.engine.generate import reach_of

    hybrid = SimpleNamespace(reach=16)
    eager = SimpleNamespace()
    compiled = SimpleNamespace(ready_rows=lambda: 8)
    cold = SimpleNamespace(ready_rows=lambda: 0)
    assert reach_of(hybrid, 3, 40, eager) == 16 and reach_of(hybrid, 3, 5, eager) == 5
    assert reach_of(hybrid, 3, 40, compiled) == 7 and reach_of(hybrid, 3, 40, cold) == 3
    assert reach_of(SimpleNamespace(), 3, 40, eager) is None and reach_of(hybrid, 0, 40, eager) is None
