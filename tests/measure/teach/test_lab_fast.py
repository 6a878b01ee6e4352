"""The fast lab (p and q once, the verification rule N times) agrees with the slow lab and with p,
and alarms on the same broken rules."""

import numpy as np
import pytest

from playground.engine import sampling
from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig
from playground.measure.teach.lab import checkpoints, fast_lab, losslessness_lab
from playground.measure.teach.stats import two_sample

DRAWS = 20_000
ALARM = 1e-4
CONFIG = SpecConfig(temperature=1.0, seed=0)


def run(pair, draws=DRAWS, progress=None):
    target, draft = pair
    return fast_lab(target, ModelDrafter(draft), [1, 5, 2], CONFIG, draws, progress)


def test_fast_lab_finds_no_difference_and_reports_as_it_draws(small_vocab_pair):
    seen = []
    result = run(small_vocab_pair, progress=seen.append)
    assert [r.draws for r in seen] == checkpoints(DRAWS) and seen[-1] is result
    assert result.speculative.sum() == result.direct.sum() == DRAWS
    assert 0 < result.accepted < DRAWS  # both the accept and the residual branch ran
    assert result.speculative_vs_p.p_value > ALARM, result.speculative_vs_p
    assert result.speculative_vs_direct.p_value > ALARM


def test_fast_and_slow_labs_see_the_same_p_and_draw_alike(small_vocab_pair):
    target, draft = small_vocab_pair
    slow = losslessness_lab(target, ModelDrafter(draft), [1, 5, 2], CONFIG, 300)  # ~0.1 s a draw on a busy CPU
    fast = run(small_vocab_pair)
    np.testing.assert_allclose(fast.exact_p, slow.exact_p, atol=1e-6)
    assert two_sample(fast.speculative, slow.speculative).p_value > ALARM
    # the share of kept guesses estimates the same α in both
    assert abs(fast.accepted / fast.draws - slow.accepted / slow.draws) < 0.03


def test_fast_lab_alarms_when_the_acceptance_rule_is_broken(small_vocab_pair, monkeypatch):
    monkeypatch.setattr(sampling, "acceptance_probs", lambda p, q, x: (q[0, x] / p[0, x]).clamp(max=1.0))
    result = run(small_vocab_pair)
    assert result.speculative_vs_p.p_value < ALARM
    assert result.direct_vs_p.p_value > ALARM  # the control still agrees: the rule is what broke


def test_fast_lab_alarms_when_rejections_resample_from_p(small_vocab_pair, monkeypatch):
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q: p)
    assert run(small_vocab_pair).speculative_vs_p.p_value < ALARM


def test_checkpoints_grow_evenly_on_a_log_scale():
    marks = checkpoints(20_000)
    assert marks[0] == 100 and marks[-1] == 20_000 and marks == sorted(set(marks))
    ratios = np.diff(np.log(marks))
    assert ratios.max() < 1.5 * ratios.min()
    assert checkpoints(40) == [40]


@pytest.mark.parametrize("draws", [0, -1, 10**9, 2.5])
def test_fast_lab_refuses_bad_draw_counts(small_vocab_pair, draws):
    with pytest.raises(ValueError, match="draws must be an integer in"):
        run(small_vocab_pair, draws)
