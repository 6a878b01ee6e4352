"""The guided lesson's content and bookkeeping: six steps, each with a paragraph, one experiment
and one prediction checked against a measurement. Pure data and functions (no Gradio, no model),
so the tab only lays them out and the tests read them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

NUMBER, CHOICE = "number", "choice"
SAME, DIFFERENT = "no detectable difference from p", "a significant difference from p"
MORE, LESS = "more than 1.5 plain steps", "1.5 plain steps or less"  # step 6's verdicts on v(5)
VERIFY_TOKENS, VERIFY_LINE = 5, 1.5  # step 6 asks whether v(VERIFY_TOKENS) > VERIFY_LINE


@dataclass(frozen=True)
class Step:
    title: str
    text: str  # the one-paragraph explanation (Markdown)
    experiment: str  # what pressing Measure does, in one sentence
    question: str  # the prediction asked for
    kind: str = NUMBER  # NUMBER: a value in [low, high]; CHOICE: one of choices
    low: float = 0.0
    high: float = 1.0
    choices: tuple[str, ...] = ()
    allowed: tuple[int, ...] = ()  # NUMBER: when set, only these values
    button: str = "Measure"


GAMMAS = (1, 2, 4, 8)  # step 5's candidates


STEPS = (
    Step(
        "What a draft is",
        "A big **target** model writes one token per forward pass. A small **draft** model is much cheaper, "
        "so we let it guess the next γ tokens, then the target checks all γ guesses in **one** forward pass and "
        "keeps the longest prefix it agrees with, plus one token of its own. So each target call yields "
        "between 1 token (the first guess was wrong) and γ + 1 (all guesses kept, plus a bonus).",
        "Generate 32 tokens of your prompt with γ = 4 and count the tokens each target call produced.",
        "How many tokens will one target call produce on average? (1 to 5)",
        low=1.0,
        high=5.0,
    ),
    Step(
        "Acceptance and the residual",
        "The target keeps a guessed token x with probability min(1, p(x)/q(x)), where p is the target's "
        "distribution and q the draft's. Averaged over what the draft proposes, that is α = Σ min(p, q). After a "
        "rejection the target does not simply sample again from p: it samples from the **residual** "
        "norm(max(0, p − q)), the tokens the draft under-rated. Open the **p/q explorer** tab to play with p and "
        "q directly (try the preset “draft over-confident”).",
        "Generate 32 tokens again and measure α: the share of tested guesses the target kept.",
        "What share α of the draft's guesses will the target keep? (0 to 1)",
    ),
    Step(
        "Why the output is still the target's",
        "Kept guesses contribute min(p, q); rejections contribute (1 − α) × residual, which is exactly "
        "max(0, p − q). Together: p. So speculative sampling is **lossless**: the text follows the target's own "
        "distribution, only faster. The **Losslessness lab** tab checks it at length; here we draw the first "
        "token of your prompt 5,000 times and compare the histogram with the target's exact p (chi-square). "
        "Greedy decoding is the limit case: the output must be the target's own greedy text, token for token in "
        "float32; in bf16 or int4 one forward over several rows rounds differently from one-token steps, so only "
        "a near-tie between the target's top two tokens may go the other way.",
        "Draw the first new token 5,000 times through the verification rule and test it against p; then "
        "generate 32 tokens greedily with and without the draft and compare them token for token (where they "
        "part, the target's top-2 margin there says whether it was a near-tie).",
        "What will 5,000 speculative draws show?",
        kind=CHOICE,
        choices=(SAME, DIFFERENT),
        button="Draw 5,000",
    ),
    Step(
        "When it pays: α, c and v",
        "Speculation is not free: each step costs γ draft forwards (each c of a target step) and one "
        "verification forward over γ + 1 tokens (v target steps; the paper assumes v = 1). It yields "
        "(1 − α^(γ+1)) / (1 − α) tokens. Expected speedup: (1 − α^(γ+1)) / ((1 − α)(γc + v)). Pick a γ and "
        "predict the speedup; the app times a plain run and a speculative run of your prompt, alternated.",
        "Time the plain target and speculative decoding at your γ (the benchmark's own measurement).",
        "What speedup do you predict at this γ? (0.1 to 10; 1 means no gain)",
        low=0.1,
        high=10.0,
        button="Measure the speedup",
    ),
    Step(
        "Picking γ for this machine",
        "A longer draft wins more tokens per call when α is high, but costs γc more drafting and, on a CPU, a "
        "larger v. The best γ therefore depends on the pair, the prompt **and the hardware**. Predict the "
        "fastest γ among 1, 2, 4 and 8, then let the app measure all four here.",
        "Time plain and speculative decoding at γ = 1, 2, 4 and 8.",
        "Which γ will be fastest on this machine? (1, 2, 4 or 8)",
        low=1,
        high=8,
        allowed=GAMMAS,
        button="Measure four γ",
    ),
    Step(
        "What a step costs here: c and v",
        "c and v are facts of the hardware and of how each forward runs (the **runner**: eager, static or "
        "compiled). On a GPU at batch 1 a small model's step is *launch-bound*: each of its many small kernels "
        "waits on its own launch, so an eager 0.5B draft costs nearly what its 1.5B target does (c near 1) and "
        "the gain is gone; compiled steps replayed as CUDA graphs take the launches away. Verification there is "
        "*memory-bound*: the weights are read once for all γ + 1 rows, so v stays near 1. On some CPU kernels "
        "it is *compute-bound*: the int4 kernel works on blocks of rows, so v jumps at 5 rows. The **Theory** "
        "tab draws v(k) for every runner side by side.",
        "Time a few forwards of each model through the run's runner: the draft's step over the target's (c), "
        "and one target forward over γ + 1 = 5 tokens over one (v(5)).",
        "Will verifying 5 tokens in one target forward cost more than 1.5 plain steps here?",
        kind=CHOICE,
        choices=(MORE, LESS),
        button="Measure c and v(5)",
    ),
)


@dataclass
class Progress:
    """One browser session's way through the lesson (kept in a gr.State)."""

    step: int = 0
    results: dict[int, dict] = field(default_factory=dict)  # step -> {"prediction", "measured", "verdict", ...}

    def moved(self, by: int) -> Progress:
        return Progress(min(max(self.step + by, 0), len(STEPS) - 1), dict(self.results))

    def with_result(self, step: int, result: dict) -> Progress:
        return Progress(self.step, {**self.results, step: result})

    @property
    def finished(self) -> bool:
        return len(self.results) == len(STEPS)


def check_prediction(step: Step, value) -> float | str:
    """The learner's prediction, or a ValueError naming the field and its range."""
    if step.kind == CHOICE:
        if value not in step.choices:
            raise ValueError(f"prediction must be one of: {', '.join(step.choices)}; got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"prediction must be a number in [{step.low:g}, {step.high:g}], got {value!r}")
    if not step.low <= value <= step.high:
        raise ValueError(f"prediction must be in [{step.low:g}, {step.high:g}], got {value!r}")
    if step.allowed and value not in step.allowed:
        raise ValueError(f"prediction must be one of {', '.join(map(str, step.allowed))}, got {value!r}")
    return float(value)


def grade(predicted: float, measured: float, tolerance: float = 0.25) -> str:
    """'close' when the prediction is within `tolerance` (relative) of the measurement, else 'off'."""
    if measured == 0:
        return "close" if abs(predicted) <= tolerance else "off"
    return "close" if abs(predicted - measured) <= tolerance * abs(measured) else "off"


def verify_verdict(v) -> str:
    """Step 6's answer from a measured curve v(1), v(2), ...: is v(5) above the line?"""
    return MORE if v[VERIFY_TOKENS - 1] > VERIFY_LINE else LESS


def grade_gamma(predicted: int, best: int) -> str:
    """'exact' for the measured best γ, 'close' for a neighbour in GAMMAS, else 'off'."""
    if predicted == best:
        return "exact"
    return "close" if abs(GAMMAS.index(int(predicted)) - GAMMAS.index(best)) == 1 else "off"
