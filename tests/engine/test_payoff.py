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


def measured(slope=0.1, model_token=0.3) -> Timings:
    """Verification at 1 + slope per extra row, the draft model at model_token a token (plain steps)."""
    timings = Timings(model_token=model_token)
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
    choice = best(choices(measured(slope=0.6, model_token=0.9), suffix_alpha=0.1, suffix_length=4,
                          model_alpha=0.3, model_length=3))
    assert choice.source == NONE and choice.length == 0 and "plain step" in choice.why()


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
