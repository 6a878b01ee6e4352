"""The losslessness lab: does speculative sampling really draw the next token from p?

Draws the first new token N times through the engine's own speculative step (real draft, real
verification, real cache rollback) and N times straight from the target, then compares both
with the target's exact p. Only the first token is drawn: it is where a draft token meets the
acceptance test and, on rejection, the residual. One drafted token is enough for that, so each
draw costs one draft forward and one verification.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .drafters import Drafter
from .engine import Generators, SpecConfig, begin, check_inputs, speculative_step
from .kvcache import CachedModel
from .sampling import logits_to_probs
from .stats import Fit, goodness_of_fit, two_sample

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
    check_inputs(target, prompt_ids, config, drafter, None)
    lm = CachedModel(target)
    begin(lm, drafter, prompt_ids)
    vocab = min(lm.vocab_size, drafter.vocab_size or lm.vocab_size)
    p = logits_to_probs(lm.logits_for(prompt_ids, keep=1)[-1, :vocab], config.sampling)
    generators = Generators(config.seed)
    speculative = np.zeros(vocab)
    accepted = 0
    for i in range(draws):
        event = speculative_step(lm, drafter, prompt_ids, 1, 1, vocab, config, generators, i)
        speculative[event.emitted[0]] += 1
        accepted += event.n_accepted
        if progress:
            progress(i + 1, draws)
    direct = np.bincount(
        torch.multinomial(p, draws, replacement=True, generator=generators.on(p.device)).cpu().numpy(),
        minlength=vocab,
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
