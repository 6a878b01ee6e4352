"""The losslessness lab reports no difference on the real engine, and alarms when it is broken."""

import pytest

from playground.engine import sampling
from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig
from playground.measure.teach.lab import losslessness_lab

DRAWS = 4000


def run_lab(small_vocab_pair, draws=DRAWS):
    target, draft = small_vocab_pair
    return losslessness_lab(target, ModelDrafter(draft), [1, 5, 2], SpecConfig(temperature=1.0, seed=0), draws)


def test_lab_finds_no_difference_on_the_engine(small_vocab_pair):
    result = run_lab(small_vocab_pair)
    assert result.speculative.sum() == result.direct.sum() == DRAWS
    assert 0 < result.accepted < DRAWS  # both the accept and the residual branch ran
    assert result.speculative_vs_p.p_value > 1e-4, result.speculative_vs_p
    assert result.speculative_vs_direct.p_value > 1e-4
    assert set(result.top_tokens(3)) <= set(range(8))


def test_lab_alarms_when_the_acceptance_rule_is_broken(small_vocab_pair, monkeypatch):
    monkeypatch.setattr(sampling, "acceptance_probs", lambda p, q, x: (q[0, x] / p[0, x]).clamp(max=1.0))
    result = run_lab(small_vocab_pair)
    assert result.speculative_vs_p.p_value < 1e-4
    assert result.speculative_vs_direct.p_value < 1e-4
    assert result.direct_vs_p.p_value > 1e-4  # the direct draws still agree: the engine is what broke


@pytest.mark.parametrize("draws", [0, -1, 10**9, 2.5])
def test_lab_refuses_bad_draw_counts(small_vocab_pair, draws):
    with pytest.raises(ValueError, match="draws must be an integer in"):
        run_lab(small_vocab_pair, draws)
