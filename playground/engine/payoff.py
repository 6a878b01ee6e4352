"""What a step's proposal pays: expected tokens per second of each source, learned during the run.

A chain of m drafts, each accepted with probability α until the first rejection, emits
(1 - α^(m+1)) / (1 - α) tokens in one target call (Leviathan et al.'s expected tokens per call),
and costs the drafting plus one verification forward of m + 1 rows. The hybrid drafter
(hybrid.py) weighs its sources with this each step: the suffixes' match at every length it
reaches, the draft model at every length up to the run's γ, and no draft at all (a plain step), and drafts from the
one with the most tokens per second. SuffixDecoding (Oliaro et al. 2024) speculates α · match
length tokens for the same reason: a long match is good evidence that the text repeats.

Nothing here is assumed where the run can measure it: α per source (and for the suffixes per
match length, a one-token match being far weaker evidence than a twenty-token one), the draft
model's one-row forward, and the target's seconds per verification at each row count. What an extra
row costs the draft is taken from the target's line (the one thing assumed: the default pair's two
measured 0.24 and 0.27 of a one-row step). Until a number is measured a prior stands in (PRIOR_*),
stated, and weighed as a couple of observations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from playground.engine.sampling import expected_tokens_per_call

NONE, SUFFIX, MODEL = "no draft", "suffixes", "draft model"
# α before a source's verdicts, worth PRIOR_WEIGHT tested positions. The draft model's prior weighs
# more: the hybrid learns a source's α only from the steps it drafts, and one early rejection under a
# light prior (0.6 over 2) put the default pair's draft (α 0.8 over a run) out of every later step
PRIOR_ALPHA = {SUFFIX: 0.5, MODEL: 0.7}
PRIOR_WEIGHT = {SUFFIX: 2.0, MODEL: 8.0}
PRIOR_C = 0.3  # a draft model token in plain target steps, until the draft model has been timed
PRIOR_SLOPE = 0.15  # each verified row over the first, in plain steps, until two row counts are timed
PRIOR_PREFILL = 0.1  # a prompt token read in one forward, in plain steps, until the first step is timed
DECAY = 0.8  # a timing's running mean keeps this much of the past: recent steps count most


def match_class(length: int) -> int:
    """The suffixes' α is learned per class of match length: 1, 2-3, 4-7, 8-15, 16 and more tokens."""
    return min(4, int(math.log2(max(1, length))))


@dataclass
class Acceptance:
    """α of one source: accepted over tested draft positions (accepted ones and the first
    rejection), from a prior worth PRIOR_WEIGHT positions (a Beta-Bernoulli mean)."""

    prior: float
    weight: float = 2.0
    accepted: float = 0.0
    tested: float = 0.0

    @property
    def alpha(self) -> float:
        return (self.accepted + self.prior * self.weight) / (self.tested + self.weight)

    def add(self, accepted: int, drafted: int) -> None:
        self.accepted += accepted
        self.tested += accepted + (accepted < drafted)


@dataclass
class Timings:
    """Seconds the run measured: the target's verification per row count, the draft model's forward.

    A draft model call of m tokens is one forward over the rows it has not read (the tokens verified
    since its last call that it did not read while drafting) and m - 1 forwards of one row. An extra
    row is taken to cost the draft what it costs the target against a one-row step (row_share: 0.27
    for the default pair's target, 0.24 for its draft, each timed alone), so each call, whatever it
    read, teaches the seconds of the draft's one-row forward (`model_row`)."""

    verify: dict[int, float] = field(default_factory=dict)  # rows -> running mean seconds
    model_row: float | None = None  # the draft model's one-row forward
    prefill_token: float | None = None  # the target's seconds per token reading the prompt (the first step)

    def add_verify(self, rows: int, seconds: float) -> None:
        self.verify[rows] = running(self.verify.get(rows), seconds)

    def add_model(self, tokens: int, read: int, seconds: float) -> None:
        """A draft model call that drafted `tokens` after reading `read` rows in its first forward."""
        if tokens > 0:
            self.model_row = running(self.model_row, seconds / (tokens + self.row_share() * max(0, read - 1)))

    def verify_s(self, rows: int) -> float:
        """A verification of `rows` rows: as measured, else on the straight line through the row
        counts measured (least squares), else PRIOR_SLOPE from the one measured (or in plain steps)."""
        if rows in self.verify:
            return self.verify[rows]
        if len(self.verify) < 2:
            (r0, t0), = self.verify.items() if self.verify else ((1, 1.0),)
            return t0 * (1 + PRIOR_SLOPE * (rows - 1)) / (1 + PRIOR_SLOPE * (r0 - 1))
        n, xs, ys = len(self.verify), list(self.verify), list(self.verify.values())
        mx, my = sum(xs) / n, sum(ys) / n
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs))
        return max(min(ys) * 0.5, my + slope * (rows - mx))

    def row_share(self) -> float:
        """What an extra verified row costs against a one-row step."""
        return max(0.0, self.verify_s(2) / self.verify_s(1) - 1)

    def model_s(self, tokens: int, alpha: float = 0.0) -> float:
        """The draft model drafting `tokens` at acceptance `alpha`: its one-row forwards, and the second
        row its next call reads after all of them are accepted (sampling.draft_cost's α^γ (c2 - c1))."""
        row = self.model_row if self.model_row is not None else PRIOR_C * self.verify_s(1)
        return row * (tokens + alpha ** tokens * self.row_share()) if tokens else 0.0

    def reading_s(self, tokens: float, behind: int = 0) -> float:
        """The draft model reading `tokens` more that it did not draft (the prompt, or what the suffixes
        or a plain step made) in its next forward, after the `behind` it has not read already: each an
        extra row, or past the row counts measured (a long read) at most the first step's rate per
        prompt token, scaled by what a draft forward costs against a target step."""
        if tokens <= 0:
            return 0.0
        rate = self.row_share()
        if behind + tokens > max(self.verify, default=1):
            timed = self.prefill_token is not None and self.verify  # seconds, not plain steps, on both sides
            prefill = self.prefill_token / self.verify_s(1) if timed else PRIOR_PREFILL
            rate = min(rate, prefill)
        return tokens * rate * self.model_s(1)


def running(mean: float | None, value: float) -> float:
    return value if mean is None else DECAY * mean + (1 - DECAY) * value


@dataclass(frozen=True)
class Choice:
    """One way to draft this step, and what it is expected to pay."""

    source: str  # NONE, SUFFIX or MODEL
    length: int  # tokens drafted
    alpha: float
    tokens: float  # expected tokens the step emits
    seconds: float  # expected drafting (the draft model's) and verification seconds (plain steps until timed)
    timed: bool = True  # whether the seconds are measured ones, not plain steps

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    def why(self, matched: int = 0) -> str:
        """One line for the step-through and the race's hover."""
        what = "a plain step" if self.source == NONE else f"{self.length} from the {self.source}"
        if self.source == SUFFIX:
            what += f" (a {matched}-token match)"
        cost = f"{self.seconds * 1000:.1f} ms" if self.timed else f"{self.seconds:.2f} plain steps (nothing timed yet)"
        return f"{what}: α {self.alpha:.2f}, {self.tokens:.2f} tokens expected for {cost}, the most per second of the choices"


def choices(timings: Timings, suffix_alpha: float, suffix_length: int, model_alpha: float,
            model_length: int, behind: int = 0, prompt: int = 0, left: int = 0) -> list[Choice]:
    """Every way to draft this step: none, the suffixes' proposal cut at each length 1..suffix_length,
    the draft model at each length 1..model_length (the run's γ: its most). The suffixes cost
    nothing beside: they were asked already. Whatever the draft model did not draft itself it reads
    in its next forward, so a plain step or the suffixes' step pays for the tokens it is expected to
    emit (timings.reading_s, after the `behind` not read yet): choosing it makes that read longer,
    and the rows already behind are paid whichever source drafts now. The `prompt` the draft model
    has not read (before its first call) is paid once and serves the rest of the run, so it is
    spread over the steps the `left` tokens would take it (a long prompt's prefill keeps the draft
    model out of a short run, where the suffixes drafting for free pay more)."""
    timed = bool(timings.verify)
    options = [Choice(NONE, 0, 0.0, 1.0, timings.verify_s(1) + timings.reading_s(1, behind), timed)]
    for m in range(1, suffix_length + 1):
        tokens = expected_tokens_per_call(suffix_alpha, m)
        options.append(Choice(SUFFIX, m, suffix_alpha, tokens, timings.verify_s(m + 1) + timings.reading_s(tokens, behind),
                              timed))
    for m in range(1, model_length + 1):
        tokens = expected_tokens_per_call(model_alpha, m)
        catch_up = timings.reading_s(prompt) / max(1.0, left / tokens)
        options.append(Choice(MODEL, m, model_alpha, tokens,
                              timings.model_s(m, model_alpha) + timings.verify_s(m + 1) + catch_up, timed))
    return options


def best(options: list[Choice]) -> Choice:
    """The most tokens per second; on a tie, the first offered (no draft, then the shorter draft)."""
    return max(options, key=lambda c: c.rate)
