"""An oracle drafter: proposes the target's own greedy continuation, recorded beforehand.

With greedy verification every proposal is accepted, so each target call yields gamma + 1 tokens
(gamma drafts and the bonus). Timing it isolates what speculation costs the target and the engine
(verifying gamma + 1 tokens in one forward, rollback, bookkeeping) from how good a draft is:
the ceiling a perfect draft could reach on this hardware.
"""

from __future__ import annotations

from playground.config import CHAIN
from playground.engine.drafters import Draft
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import output_tokens


class OracleDrafter:
    """Follows the Drafter protocol. `sequence` is prompt + recorded continuation (token ids)."""

    name = "oracle"
    speculation = CHAIN
    vocab_size = None  # deterministic: q is one-hot on the proposed token
    device = None  # and it draws no randomness

    def __init__(self, sequence: list[int]):
        self.sequence = [int(t) for t in sequence]

    def begin(self, ids: list[int]) -> None:
        pass  # nothing to compute: the continuation is already known

    def propose(self, ids, k, sampling, generator, min_confidence=0.0, stop_tokens=frozenset()) -> Draft:
        """The next k recorded tokens, if the context is still on the recorded path; else none."""
        n = len(ids)
        if self.sequence[:n] != list(ids):
            return Draft([], None)  # the run left the recording (a near-tie flipped): propose nothing
        return Draft(self.sequence[n : n + k], None)


def greedy_continuation(target, prompt_ids: list[int], max_new_tokens: int, eos=()) -> list[int]:
    """The target's own greedy continuation, one token per step: what the oracle will propose."""
    config = SpecConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    return output_tokens(list(generate(target, prompt_ids, config, None, eos_token_ids=eos)))


def converge_oracle(target, prompt_ids, recording, gamma, eos=(), rounds: int = 8) -> tuple[list[int], int]:
    """A recording the speculative run reproduces exactly at this gamma, and the rounds it took.

    In bf16 a forward over gamma + 1 tokens rounds differently from one-token steps, so at a
    near-tie the verifier can pick another token than the one-token recording; from there the
    oracle has nothing to propose. The speculative output itself is the target's greedy
    continuation under this gamma's forwards, so re-recording it moves past each flip; it stops
    when the output equals the recording (every proposal accepted), or after `rounds`.
    """
    config = SpecConfig(gamma=gamma, temperature=0.0, max_new_tokens=len(recording))
    for round_ in range(1, rounds + 1):
        drafter = OracleDrafter(list(prompt_ids) + list(recording))
        out = output_tokens(list(generate(target, prompt_ids, config, drafter, eos_token_ids=eos)))
        if out == list(recording):
            return list(recording), round_
        recording = out
    return list(recording), rounds
