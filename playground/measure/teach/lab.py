"""The losslessness lab: does speculative sampling really draw the next token from p?

Draws the first new token N times through the engine's own speculative step (real draft, real
verification, real cache rollback) and N times straight from the target, then compares both
with the target's exact p. Only the first token is drawn: it is where a draft token meets the
acceptance test and, on rejection, the residual. One drafted token is enough for that, so each
draw costs one draft forward and one verification.

The fast mode (fast_lab) computes p and q once and applies the verification rule to N fresh
guesses: the same check in seconds instead of minutes, since neither distribution changes
between draws of the first token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from playground.engine.drafters import Drafter
from playground.engine.generate import (Decoding, Generators, SpecConfig, begin, check_inputs, draft_tokens, one_hot_q,
                                        speculative_step, start)
from playground.measure.teach.explorer import draw_batched
from playground.engine.sampling import logits_to_probs, widened
from playground.measure.teach.stats import Fit, goodness_of_fit, two_sample

MAX_DRAWS = 100_000


@dataclass(frozen=True)
class LabResult:
    draws: int
    exact_p: np.ndarray  # the target's processed next-token distribution, [V]
    speculative: np.ndarray  # counts of the first token drawn by speculative sampling, [V]
    direct: np.ndarray  # counts of the first token drawn from the target alone, [V]
    speculative_vs_p: Fit  # speculative counts against the exact p
    direct_vs_p: Fit  # the same check on direct draws: what "no difference" looks like
    speculative_vs_direct: Fit  # the two samples against each other
    accepted: int  # draws where the draft token itself was kept

    def top_tokens(self, n: int = 12) -> list[int]:
        """The outcomes worth plotting: the likeliest under p and whatever was actually drawn often."""
        score = self.exact_p + (self.speculative + self.direct) / (2 * max(self.draws, 1))
        return [int(i) for i in np.argsort(-score)[:n]]


def losslessness_lab(
    target,
    drafter: Drafter,
    prompt_ids: list[int],
    config: SpecConfig,
    draws: int,
    progress: Callable[[int, int], None] | None = None,
) -> LabResult:
    """Draw the first token `draws` times each way and compare with the exact p."""
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MAX_DRAWS:
        raise ValueError(f"draws must be an integer in [1, {MAX_DRAWS}], got {draws!r}")
    state, p = first_p(target, drafter, prompt_ids, config)
    speculative = np.zeros(p.shape[-1])
    accepted = 0
    for i in range(draws):
        event = speculative_step(state, prompt_ids, 1)
        speculative[event.emitted[0]] += 1
        accepted += event.n_accepted
        if progress:
            progress(i + 1, draws)
    direct = np.bincount(
        torch.multinomial(p, draws, replacement=True, generator=state.generators.on(p.device)).cpu().numpy(),
        minlength=p.shape[-1],
    ).astype(float)
    exact = p.double().cpu().numpy()
    return LabResult(
        draws=draws,
        exact_p=exact,
        speculative=speculative,
        direct=direct,
        speculative_vs_p=goodness_of_fit(speculative, exact),
        direct_vs_p=goodness_of_fit(direct, exact),
        speculative_vs_direct=two_sample(speculative, direct),
        accepted=accepted,
    )


# -- fast mode: p and q once, then the verification rule N times -------------------------------


def first_p_and_q(target, drafter: Drafter, prompt_ids: list[int], config: SpecConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's p and the draft's q for the first new token, each from one forward, through
    the engine's own code (prefill, the drafter's proposal, the same logits processing). [V] each"""
    state, p = first_p(target, drafter, prompt_ids, config)
    draft = draft_tokens(state, prompt_ids, 1)
    if not draft.tokens:
        raise ValueError("the drafter proposed no token for this prompt (lower min_confidence)")
    q = one_hot_q(torch.tensor(draft.tokens[:1]), p.shape[-1])[0] if draft.q is None else draft.q[0]
    width = max(p.shape[-1], q.shape[-1])  # p at the target's whole width; q zero where the draft has no id
    return widened(p, width, 0.0), widened(q.to(device=p.device, dtype=p.dtype), width, 0.0)


def first_p(target, drafter: Drafter, prompt_ids: list[int], config: SpecConfig) -> tuple[Decoding, torch.Tensor]:
    """The engine's decoding state at the prompt, and the target's p for the first new token.  p: [V]"""
    check_inputs(target, prompt_ids, config, drafter, None)
    state = start(target, drafter, config)
    begin(state, prompt_ids)
    return state, logits_to_probs(state.lm.logits_for(prompt_ids, keep=1)[-1], config.sampling)


def checkpoints(draws: int, first: int = 100, per_decade: int = 6) -> list[int]:
    """Draw counts at which the fast lab reports: evenly spaced on a log scale, ending at draws."""
    if draws <= first:
        return [draws]
    steps = max(1, round(per_decade * np.log10(draws / first)))
    marks = np.unique(np.round(first * (draws / first) ** (np.arange(steps + 1) / steps)).astype(int))
    return [int(m) for m in marks[:-1]] + [draws]


def fast_lab(
    target,
    drafter: Drafter,
    prompt_ids: list[int],
    config: SpecConfig,
    draws: int,
    progress: Callable[[LabResult], None] | None = None,
) -> LabResult:
    """The lab in seconds: p and q are computed once (the first new token's distributions do not
    change from draw to draw), then each draw applies the verification rule to a fresh guess from
    q (explorer.draw_batched: sampling's acceptance_probs and residual_distribution). Direct draws
    from p are the control, as in the slow lab. progress(result so far) at every checkpoint."""
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= MAX_DRAWS:
        raise ValueError(f"draws must be an integer in [1, {MAX_DRAWS}], got {draws!r}")
    p, q = first_p_and_q(target, drafter, prompt_ids, config)
    generator = Generators(config.seed).on(p.device)
    exact = p.double().cpu().numpy()
    speculative, direct = np.zeros(len(exact)), np.zeros(len(exact))
    accepted = done = 0
    result = None
    for mark in checkpoints(draws):
        tokens, kept = draw_batched(p, q, mark - done, generator)
        speculative += np.bincount(tokens.cpu().numpy(), minlength=len(exact))
        direct += np.bincount(
            torch.multinomial(p, mark - done, replacement=True, generator=generator).cpu().numpy(),
            minlength=len(exact),
        )
        accepted, done = accepted + kept, mark
        result = summarize_draws(exact, speculative, direct, accepted)
        if progress:
            progress(result)
    return result


def summarize_draws(exact: np.ndarray, speculative: np.ndarray, direct: np.ndarray, accepted: int) -> LabResult:
    return LabResult(
        draws=int(speculative.sum()),
        exact_p=exact,
        speculative=speculative.copy(),
        direct=direct.copy(),
        speculative_vs_p=goodness_of_fit(speculative, exact),
        direct_vs_p=goodness_of_fit(direct, exact),
        speculative_vs_direct=two_sample(speculative, direct),
        accepted=accepted,
    )
