"""Sampling math of speculative decoding, as pure functions over tensors.

Notation from Leviathan et al. 2023 (Algorithm 1): p is the target distribution, q the draft
distribution, gamma the number of drafted tokens. Nothing here touches a model, does I/O or
reseeds: randomness comes only from the `torch.Generator` the caller passes in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from playground.config import check


@dataclass(frozen=True)
class Sampling:
    """Logits processing applied identically to p and q (losslessness depends on it)."""

    temperature: float = 0.0  # 0 means greedy: argmax, no randomness drawn
    top_k: int = 0  # keep the k most likely tokens; 0 turns it off
    top_p: float = 1.0  # keep the smallest set whose mass reaches top_p; 1 turns it off

    def __post_init__(self):
        check(self)  # ranges declared once, in config.RunConfig

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# -- logits -> probabilities ------------------------------------------------------------------


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Set every logit below the k-th largest of its row to -inf.  logits: [..., V]"""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, -math.inf)


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the most likely tokens until their mass reaches top_p (at least one).

    Same rule as transformers' TopPLogitsWarper, so our p matches the field's.
    """
    if top_p >= 1.0:
        return logits
    probs = logits.softmax(dim=-1)
    top, order, below = nucleus_candidates(probs, top_p)
    ascending_mass = below + top.flip(-1).cumsum(dim=-1).flip(-1)  # transformers' cumulative sum
    keep_sorted = ascending_mass > 1 - top_p
    keep_sorted[..., 0] = True  # the most likely token always survives
    remove = torch.ones_like(logits, dtype=torch.bool).scatter(-1, order, ~keep_sorted)
    return logits.masked_fill(remove, -math.inf)


def nucleus_candidates(probs: torch.Tensor, top_p: float, first: int = 64):
    """The most likely tokens of each row, descending, enough of them to hold the nucleus: the
    top k whose leftover mass `below` is at most 1 - top_p in every row, so every token outside is
    one the rule removes anyway.  -> (top [.., k], their ids, below [.., 1])

    Sorting a 150k vocabulary costs ~7 ms a row on a CPU, and a nucleus is mostly tens of tokens:
    k starts small and grows fourfold until it holds the nucleus (one read of the leftover each
    time; a flat row ends at the whole vocabulary, where nothing is left over)."""
    vocab, k = probs.shape[-1], min(first, probs.shape[-1])
    total = probs.sum(dim=-1, keepdim=True)
    while True:
        top, order = probs.topk(k, dim=-1)  # descending
        below = total - top.sum(dim=-1, keepdim=True)
        if k == vocab or bool((below <= 1 - top_p).all()):
            return top, order, below
        k = min(vocab, 4 * k)


def logits_to_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Temperature, then top-k, then top-p (transformers' order), then softmax.  [..., V] -> [..., V]

    Greedy (temperature 0) gives the one-hot of the argmax: the limit of temperature -> 0.
    """
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    logits = logits / sampling.temperature
    logits = apply_top_k(logits, sampling.top_k)
    logits = apply_top_p(logits, sampling.top_p)
    return logits.softmax(dim=-1)


def display_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The probabilities a viewer should see: p or q itself, or plain softmax when greedy.

    Greedy decisions only use the argmax; showing softmax(logits) tells how confident it was.
    """
    if sampling.greedy:
        return logits.float().softmax(dim=-1)
    return logits_to_probs(logits, sampling)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a probability row.  probs: [V]

    On a CPU by the inverse of the cumulative distribution (in float64, one uniform): exact, and
    ~1 ms for 152k tokens where torch.multinomial takes 15-20 ms (it draws an exponential per
    token), which was most of the cost of a sampled token. On a GPU multinomial is fast as it is."""
    if probs.device.type != "cpu":
        return int(torch.multinomial(probs, 1, generator=generator))
    cumulative = probs.double().cumsum(-1)
    u = torch.rand(1, generator=generator, dtype=torch.float64)
    # the first token whose cumulative mass passes u·total: never a token of zero mass
    return int(torch.searchsorted(cumulative, u * cumulative[-1], right=True).clamp_max(probs.shape[-1] - 1))


def pick(probs: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """Argmax when greedy, else a sample: how both the draft and the baseline choose a token."""
    if sampling.greedy:
        return int(probs.argmax())
    return sample(probs, generator)


# -- one vocabulary for p and q ---------------------------------------------------------------


def common_width(target_logits: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p's logits and q over one vocabulary, the target's whole width: a draft narrower than the
    target gets q = 0 on the ids it lacks (its mass is already on its own ids). Cutting p to the
    draft's width instead (as an earlier version did) made the target's ids past it unreachable,
    even by a plain step or a bonus token. (A draft wider than the target is refused at the start
    of a run, or drafts only the target's ids: the target cannot read an id it does not have.)"""
    return target_logits, widened(q, target_logits.shape[-1], 0.0)


def widened(rows: torch.Tensor, width: int, fill: float) -> torch.Tensor:
    """rows [..., W] padded with `fill` to [..., width] (no copy when already that wide)."""
    extra = width - rows.shape[-1]
    return rows if extra == 0 else torch.nn.functional.pad(rows, (0, extra), value=fill)


# -- Algorithm 1 ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft against the target."""

    n_accepted: int  # leading draft tokens kept
    next_token: int  # resampled from the residual after a rejection, or the bonus token
    accept_probs: list[float]  # min(1, p(x)/q(x)) per drafted position
    uniforms: list[float]  # u drawn per tested position (empty when greedy)
    residual: torch.Tensor | None  # norm(max(0, p - q)) at the rejected position, else None


def acceptance_probs(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)) for each drafted token x.  p, q: [k, V] (p may have k+1 rows), tokens: [k]"""
    k = tokens.shape[0]
    rows = torch.arange(k, device=tokens.device)
    p_x, q_x = p[rows, tokens], q[rows, tokens]
    # q(x) > 0 for every token the draft proposed; the clamp only guards rounding.
    return (p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny)).clamp(max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): where the target resamples after a rejection.  p, q: [V]

    A rejection only happens where p(x) < q(x), so the residual has mass in exact arithmetic;
    if rounding leaves none, p itself is the right limit.
    """
    residual = (p - q).clamp_min(0)
    total = residual.sum()
    return torch.where(total > 0, residual / total, p)  # chosen on the device: no wait for the host


def speculative_verify(
    tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator | None
) -> Verdict:
    """Algorithm 1: accept each draft token with probability min(1, p/q) until the first rejection,
    then resample from the residual; after a fully accepted draft, add a bonus token from p.

    tokens: [k] drafted tokens, q: [k, V] draft probs, p: [k+1, V] target probs (one row more).
    Two reads on the host: the ratios and uniforms together (they decide n), then the token drawn.
    """
    k = tokens.shape[0]
    ratio = acceptance_probs(p, q, tokens)
    u = torch.rand(k, generator=generator, device=p.device)
    read = torch.cat([ratio, u]).tolist()  # one transfer
    ratios, uniforms = read[:k], read[k:]
    n = next((i for i in range(k) if uniforms[i] >= ratios[i]), k)
    tested = min(n + 1, k)  # positions after the first rejection were never tested
    if n < k:
        residual = residual_distribution(p[n], q[n])
        next_token = sample(residual, generator)
    else:
        residual = None
        next_token = sample(p[k], generator)
    return Verdict(n, next_token, ratios, uniforms[:tested], residual)


def greedy_verify(tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy limit: keep draft tokens while they equal the target's argmax; the next token is
    the target's argmax after the kept prefix.  tokens: [k] (a tensor or the host's list),
    target_logits: [k+1, V]. One read on the host: the target's argmax at every row.
    """
    drafted = tokens.tolist() if torch.is_tensor(tokens) else list(tokens)  # the engine passes its host list
    k, best = len(drafted), target_logits.argmax(-1).tolist()  # [k+1], one transfer
    matches = [float(x == b) for x, b in zip(drafted, best)]
    n = next((i for i in range(k) if not matches[i]), k)
    return Verdict(n, best[n], matches, [], None)


# -- theory -----------------------------------------------------------------------------------


def expected_tokens_per_call(alpha: float, gamma: float) -> float:
    """E[tokens per target call] = (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def verify_cost(v, k: float) -> float:
    """v(k): one target forward over k tokens, in plain steps. v is None (the paper's assumption,
    v = 1), a number (v(k) itself, measured for this k), or a sequence of measured v(1), v(2), ...;
    between whole k a curve is interpolated linearly (a mean γ is fractional)."""
    if v is None:
        return 1.0
    if isinstance(v, (int, float)):
        return float(v)
    if not 1 <= k <= len(v):
        raise ValueError(f"k: the verification cost curve covers k in [1, {len(v)}], got {k}")
    low = int(k)
    if low == k or low == len(v):
        return float(v[low - 1])
    return float(v[low - 1] + (k - low) * (v[low] - v[low - 1]))


def draft_cost(c, alpha: float, gamma: float) -> float:
    """Plain steps one call's drafting costs. c a number: γ c, the paper's. c a pair (c(1), c(2)), a
    draft step over one row and over two as timed alone: a chain's first draft forward also reads the
    call before's last drafted token when that call accepted all γ (probability α^γ), so it runs two
    rows (that token and the bonus), otherwise one (the resampled token); the other γ - 1 read one.
    The default pair's draft (ONNX Runtime, int4, a 2-core EPYC) took 13.4 ms over one row and 16.0 ms
    over two: at α 0.9 and γ 1 a run pays c 0.43 of a 37 ms target step, not the 0.36 of one row alone."""
    if not gamma:
        return 0.0
    if isinstance(c, tuple):
        one, two = c
        return gamma * one + alpha ** gamma * (two - one)
    return gamma * c


def expected_speedup(alpha: float, gamma: float, c, v=None) -> float:
    """Leviathan et al.'s improvement factor, with verification costing v(gamma+1) plain steps:
    (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + v(gamma+1))).

    c is what draft_cost reads: one draft step, or (one row, two rows) as timed alone. v is what
    verify_cost reads: None for the paper's v = 1, a measured v(gamma+1), or a curve v(1), v(2), ..."""
    return expected_tokens_per_call(alpha, gamma) / (draft_cost(c, alpha, gamma) + verify_cost(v, gamma + 1))


def sloped_speedup(alpha: float, gamma: float, c: float, slope: float) -> float:
    """The improvement factor with verification costing 1 + slope·γ plain steps: the straight line
    through verification costs timed at a few γ (runs measured without a v(k) curve)."""
    return expected_speedup(alpha, gamma, c, 1 + slope * gamma)


def best_gamma(alpha: float, c, max_gamma: int = 16, v=None) -> int:
    """The lookahead that maximises the expected speedup (gamma = 0 means: do not speculate); c as
    draft_cost reads it.
    With a measured curve v, only lookaheads whose verification was measured are considered."""
    if v is not None:
        max_gamma = min(max_gamma, len(v) - 1)
    return max(range(max_gamma + 1), key=lambda g: expected_speedup(alpha, g, c, v))


def gamma_ceiling(c: float, v, max_gamma: int = 16) -> int:
    """The adaptive schedule's upper bound: the longest draft that pays even when every token is
    accepted, argmax over gamma of (gamma + 1) / (gamma c + v(gamma + 1)). The schedule grows gamma
    after full acceptances, that is on a streak where alpha is near 1; past this bound even a streak
    costs more in drafting and verification than its extra tokens bring. Only lookaheads whose
    verification was measured are considered."""
    max_gamma = min(max_gamma, len(v) - 1)
    if max_gamma < 1:
        raise ValueError(f"v: the verification cost curve needs v(1) and v(2) at least, got {len(v)} values")
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(1.0, g, c, v))  # alpha = 1
