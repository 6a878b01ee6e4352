"""The p/q explorer: what one verification does to a hand-made p (target) and q (draft).

Pure functions over a small vocabulary, no model: the quantities of Algorithm 1 (Leviathan et
al. 2023) for one drafted position, and draws through the engine's own verification rule.
Every number comes from `sampling` (acceptance_probs, residual_distribution,
speculative_verify), so what the explorer shows is what the engine does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from playground.config import check_number
from playground.engine import sampling

TOKENS = ("cat", "dog", "fox", "owl", "bee", "emu")  # the explorer's vocabulary
MIN_TOKENS, MAX_TOKENS = 2, 8
MAX_DRAWS = 100_000


@dataclass(frozen=True)
class Preset:
    name: str
    lesson: str  # what the preset shows, in one sentence
    p: tuple[float, ...]  # target weights over TOKENS (normalised on use)
    q: tuple[float, ...]  # draft weights over TOKENS


PRESETS = {
    p.name: p
    for p in (
        Preset(
            "draft over-confident",
            "The draft puts most of its mass on “cat”; the target is less sure, so “cat” is often "
            "rejected and the residual hands that mass to the tokens the draft under-rates.",
            (0.35, 0.25, 0.15, 0.10, 0.10, 0.05),
            (0.80, 0.08, 0.04, 0.04, 0.02, 0.02),
        ),
        Preset(
            "draft misses a token the target likes",
            "The draft never proposes “owl” (q = 0), yet the target gives it 30%: only the residual "
            "can produce it, and it does, exactly as often as p says.",
            (0.25, 0.20, 0.15, 0.30, 0.05, 0.05),
            (0.35, 0.30, 0.20, 0.00, 0.10, 0.05),
        ),
        Preset(
            "identical",
            "q = p: every guess is kept (α = 1), the residual is empty and never used.",
            (0.30, 0.25, 0.20, 0.10, 0.10, 0.05),
            (0.30, 0.25, 0.20, 0.10, 0.10, 0.05),
        ),
        Preset(
            "disjoint",
            "The draft only proposes tokens the target never picks: α = 0, every guess is rejected "
            "and the output is the residual, which is p itself.",
            (0.50, 0.50, 0.00, 0.00, 0.00, 0.00),
            (0.00, 0.00, 0.25, 0.25, 0.25, 0.25),
        ),
    )
}


def distribution(name: str, weights: Sequence[float]) -> np.ndarray:
    """Weights (sliders, any scale) normalised to a distribution; ValueError names the field."""
    if not MIN_TOKENS <= len(weights) <= MAX_TOKENS:
        raise ValueError(f"{name} must have {MIN_TOKENS} to {MAX_TOKENS} weights, got {len(weights)}")
    for i, w in enumerate(weights):
        check_number(f"{name}[{i}]", w, low=0.0, high=1e6)
    w = np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        raise ValueError(f"{name} must have a positive weight somewhere, got all zeros")
    return w / w.sum()


@dataclass(frozen=True)
class Verification:
    """Every quantity of one verification of a single drafted token, per vocabulary entry."""

    p: np.ndarray  # target distribution
    q: np.ndarray  # draft distribution
    overlap: np.ndarray  # min(p, q): the chance the draft proposes x AND it is kept
    alpha: float  # Σ min(p, q): the chance the guess is kept, whatever it is
    accept: np.ndarray  # min(1, p/q) for a drafted x; nan where q = 0 (never drafted)
    rejected: np.ndarray  # max(0, q − p): the chance x is drafted AND rejected (sums to 1 − α)
    residual: np.ndarray  # norm(max(0, p − q)): where the target resamples after a rejection
    resampled: np.ndarray  # (1 − α) · residual: the chance x comes out of a resample

    @property
    def emitted(self) -> np.ndarray:
        """The output distribution: kept guesses plus resamples. Equals p: the whole point."""
        return self.overlap + self.resampled


def verification(p: np.ndarray, q: np.ndarray) -> Verification:
    """The quantities of Algorithm 1 for one position, computed with the engine's functions."""
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same length, got {len(p)} and {len(q)}")
    pt, qt = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    tokens = torch.arange(len(p))
    # acceptance_probs reads row i for token i, so p and q are repeated once per token.
    accept = sampling.acceptance_probs(pt.expand(len(p), -1), qt.expand(len(p), -1), tokens).numpy()
    accept = np.where(q > 0, accept, np.nan)
    overlap = np.minimum(p, q)
    alpha = float(overlap.sum())
    residual = sampling.residual_distribution(pt, qt).numpy()
    rejection = max(0.0, 1.0 - alpha)
    return Verification(p, q, overlap, alpha, accept, np.maximum(0.0, q - p), residual, rejection * residual)


# -- draws ---------------------------------------------------------------------------------------


def check_draws(draws) -> int:
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MAX_DRAWS:
        raise ValueError(f"draws must be an integer in [1, {MAX_DRAWS}], got {draws!r}")
    return draws


def draw_one(p: torch.Tensor, q: torch.Tensor, generator: torch.Generator) -> tuple[int, bool]:
    """One draft token from q, verified by the engine's speculative_verify with γ = 1.

    Returns the emitted token and whether it was the draft's own guess. p, q: [V]
    """
    x = sampling.sample(q, generator)
    verdict = sampling.speculative_verify(torch.tensor([x]), q[None], torch.stack([p, p]), generator)
    kept = verdict.n_accepted == 1
    return (x if kept else verdict.next_token), kept


def stream_real(p: np.ndarray, q: np.ndarray, draws: int, seed: int, every: int = 500) -> Iterator[tuple[np.ndarray, int]]:
    """`draws` independent γ = 1 verifications through speculative_verify itself, one at a time
    (~0.3 ms each on a small vocabulary). Yields (counts per token, guesses kept) so far every
    `every` draws and once at the end, so a page can redraw the histogram while it grows."""
    check_draws(draws)
    generator = torch.Generator().manual_seed(int(seed))
    pt, qt = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    counts = np.zeros(len(p))
    kept = 0
    for i in range(draws):
        token, was_kept = draw_one(pt, qt, generator)
        counts[token] += 1
        kept += was_kept
        if (i + 1) % every == 0 or i + 1 == draws:
            yield counts.copy(), kept


def draw_real(p: np.ndarray, q: np.ndarray, draws: int, seed: int) -> tuple[np.ndarray, int]:
    """stream_real's final (counts per token, guesses kept)."""
    *_, last = stream_real(p, q, draws, seed, every=draws)
    return last


def draw_batched(p: torch.Tensor, q: torch.Tensor, draws: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """The same rule as speculative_verify with γ = 1, for many independent drafts at once: draft
    x ~ q, keep it when u < min(1, p(x)/q(x)), else resample from norm(max(0, p − q)).

    For a large vocabulary (the lab's 151k tokens), where one speculative_verify costs ~80 ms
    (a fresh residual and a multinomial over the vocabulary per call). The acceptance
    probabilities and the residual come from sampling's own functions, so a change to the
    engine's rule changes these draws too (tests/measure/teach/test_explorer.py checks both ways agree).
    Returns (emitted tokens [draws], guesses kept). p, q: [V]
    """
    check_draws(draws)
    guesses = torch.multinomial(q, draws, replacement=True, generator=generator)  # [draws]
    ratio = sampling.acceptance_probs(p.expand(draws, -1), q.expand(draws, -1), guesses)  # [draws]
    u = torch.rand(draws, generator=generator, dtype=ratio.dtype, device=p.device)
    kept = u < ratio  # speculative_verify rejects when u >= ratio
    residual = sampling.residual_distribution(p, q)  # the same for every draw: one p, one q
    resampled = torch.multinomial(residual, draws, replacement=True, generator=generator)
    return torch.where(kept, guesses, resampled), int(kept.sum())


def expected_distance(p: np.ndarray, draws: int) -> float:
    """The total variation distance that exact sampling of `draws` tokens from p shows on average
    (normal approximation, one term per token): the 1/√N noise floor of every histogram."""
    p = np.asarray(p, dtype=float)
    return float(0.5 * np.sum(np.sqrt(2 * p * (1 - p) / (math.pi * max(draws, 1)))))
