"""Goodness-of-fit figures for losslessness checks: do sampled tokens follow p?

Shared by the tests and the losslessness lab, so the check users see is the check CI runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_EXPECTED = 5.0  # chi-square needs about five expected draws per cell; rarer cells are pooled


@dataclass(frozen=True)
class Fit:
    draws: int
    total_variation: float  # 0.5 * sum |empirical - expected|
    chi2: float
    dof: int
    p_value: float  # chance of a chi2 at least this large if the samples do follow the distribution
    impossible: int  # draws that landed where the distribution has zero mass


def goodness_of_fit(counts, probs) -> Fit:
    """Compare observed counts over outcomes with the probabilities they should follow."""
    counts = np.asarray(counts, dtype=float)
    probs = np.asarray(probs, dtype=float)
    probs = probs / probs.sum()
    n = counts.sum()
    impossible = int(counts[probs == 0].sum())
    chi2, dof = pooled_chi2(counts[probs > 0], n * probs[probs > 0])
    tv = 0.5 * float(np.abs(counts / max(n, 1) - probs).sum())
    p_value = 0.0 if impossible else float(stats.chi2.sf(chi2, dof)) if dof else 1.0
    return Fit(int(n), tv, chi2, dof, p_value, impossible)


def two_sample(counts_a, counts_b) -> Fit:
    """Do two sets of draws over the same outcomes come from one distribution? (chi-square
    test of homogeneity, rare outcomes pooled). For samples where the exact p is unknown."""
    a = np.asarray(counts_a, dtype=float)
    b = np.asarray(counts_b, dtype=float)
    table = np.stack([a, b])
    keep = table.sum(0) > 0
    table = table[:, keep]
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    small = expected.min(0) < MIN_EXPECTED
    if small.any():
        table = np.column_stack([table[:, ~small], table[:, small].sum(1)])
    if table.shape[1] < 2:
        chi2, dof, p_value = 0.0, 0, 1.0
    else:
        chi2, p_value, dof, _ = stats.chi2_contingency(table, correction=False)
    pa, pb = a / max(a.sum(), 1), b / max(b.sum(), 1)
    tv = 0.5 * float(np.abs(pa - pb).sum())
    return Fit(int(a.sum() + b.sum()), tv, float(chi2), int(dof), float(p_value), 0)


def pooled_chi2(observed: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """Pearson's chi-square with cells expecting fewer than MIN_EXPECTED draws pooled into one."""
    small = expected < MIN_EXPECTED
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if len(exp) < 2:
        return 0.0, 0
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1
