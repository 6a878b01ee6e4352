"""Whether a draft can pay on this device, said before a race (issue 47): the formula's best speedup
over γ at the draft's acceptance α and the draft cost c and verification cost v(k) measured here, and,
where it falls short of PAYS, what the same measurements favour instead.

Pure: numbers in, a Verdict out; no model, no clock. The formula is engine/sampling.py's
(expected_speedup, best_gamma), never a copy. The numbers are what the app has measured (the race's
payoff.py gathers them); where nothing is measured, nothing is said.
"""

from __future__ import annotations

from dataclasses import dataclass

from playground.measure.bench.follow import MAX_GAMMA

PAYS = 1.05  # a best forecast below this over every γ: the page says the draft cannot pay here
ASSUMED, ASSUMED_ALPHA = "assumed", 0.8  # α where nothing measured it: a good draft's, said as assumed
LAUNCH_BOUND_C = 0.5  # c from here: the draft's step costs most of the target's, so a bigger target lowers c


@dataclass(frozen=True)
class Alpha:
    """The draft's acceptance rate and where it comes from (models.yaml, the drafts board, or ASSUMED)."""

    value: float
    source: str

    def said(self) -> str:
        if self.source == ASSUMED:
            return f"α {self.value:.2f} (assumed: nothing has measured this draft's acceptance here yet)"
        return f"α {self.value:.2f} ({self.source})"


@dataclass(frozen=True)
class Costs:
    """c and v(k) as measured on this device through one runner."""

    # c as the formula reads it (sampling.draft_cost): one draft step over one plain target step, or that
    # step over one row and over two (a step after an all-accepted call) where both were timed
    steps: float | tuple[float, float]
    v: tuple[float, ...] | None  # v(1), v(2), ...; None: not measured, the paper's v = 1 (a ceiling on the gain)
    runner: str
    source: str  # what measured them, in words

    @property
    def c(self) -> float:
        """The draft's step over one row."""
        return self.steps[0] if isinstance(self.steps, tuple) else self.steps

    def said(self) -> str:
        if self.v is None:
            curve = "verification taken at one plain step (v(k) not measured: the most it could gain)"
        else:
            shown = self.v[1:MAX_GAMMA + 1]
            curve = f"v(2..{len(shown) + 1}) {min(shown):.2f}–{max(shown):.2f}" if shown else "v(k) 1"
        two = f" (over two rows {self.steps[1]:.2f})" if isinstance(self.steps, tuple) else ""
        return f"c {self.c:.2f}{two} and {curve} through {self.runner} ({self.source})"


@dataclass(frozen=True)
class Alternative:
    """Something the same measurements favour over this draft here, and why, in a sentence."""

    what: str
    why: str


@dataclass(frozen=True)
class Verdict:
    gamma: int  # the formula's best γ (1 where no γ pays)
    speedup: float  # its forecast over plain decoding on the same runner
    shown: bool  # below PAYS: the page says the draft cannot pay
    text: str  # what the page says ("" when not shown)
    alternatives: tuple[Alternative, ...] = ()


def best(alpha: float, c, v) -> tuple[int, float]:
    """c: one draft step, or (one row, two rows) as sampling.draft_cost reads it. The formula's best γ from 1 to the measured curve's last (or MAX_GAMMA) and its forecast: where no
    γ pays, still the least loss (sampling.best_gamma would answer γ 0, not speculating)."""
    from playground.engine.sampling import expected_speedup  # torch: not at import

    top = MAX_GAMMA if v is None else min(MAX_GAMMA, len(v) - 1)
    gamma = max(range(1, top + 1), key=lambda g: expected_speedup(alpha, g, c, v))
    return gamma, expected_speedup(alpha, gamma, c, v)


def break_even_alpha(c: float, v, steps: int = 40) -> float | None:
    """The least α at which drafting at cost c reaches PAYS at its best γ, to 1e-6 or so (the forecast
    grows with α); None where not even α close to 1 does."""
    low, high = 0.0, 0.999
    if best(high, c, v)[1] < PAYS:
        return None
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if best(mid, c, v)[1] < PAYS else (low, mid)
    return high


def verdict(alpha: Alpha, costs: Costs, alternatives=()) -> Verdict:
    """The formula at α, c and v(k): shown where its best speedup over γ is below PAYS, with what
    the same measurements favour instead (`alternatives`, as the functions below make them)."""
    gamma, speedup = best(alpha.value, costs.steps, costs.v)
    if speedup >= PAYS:
        return Verdict(gamma, speedup, False, "")
    kept = tuple(a for a in alternatives if a is not None)
    instead = ("; ".join(f"{a.what}: {a.why}" for a in kept) if kept
               else "nothing measured here does: plain decoding is the fastest way to run this target here")
    text = (f"This draft cannot pay on this device: at {alpha.said()}, {costs.said()}, the formula's best is "
            f"γ {gamma} at {speedup:.2f}× plain decoding (it takes {PAYS:.2f}× to call it a gain). "
            f"What the same measurements favour here: {instead}.")
    return Verdict(gamma, speedup, True, text, kept)


# -- what the same measurements favour --------------------------------------------------------------


def other_runner(runner: str, alpha: Alpha, c: float, v, plain_ms: float | None = None,
                 fastest_ms: float | None = None) -> Alternative | None:
    """This draft on another runner, where its c (and v, if measured) there forecast a gain over the
    fastest plain step measured (`fastest_ms`, any runner; `plain_ms`: the target's step there)."""
    gamma, speedup = best(alpha.value, c, v)
    over = speedup * fastest_ms / plain_ms if plain_ms and fastest_ms else speedup
    if over < PAYS:
        return None
    against = (f", {over:.2f}× the fastest plain decoding measured (a plain step {plain_ms:.1f} ms there, "
               f"{fastest_ms:.1f} at the fastest)" if plain_ms and fastest_ms else "")
    curve = "" if v is not None else ", v(k) not measured there"
    return Alternative(f"runner {runner}", f"c {c:.2f} there{curve}: {speedup:.2f}× at γ {gamma}{against}")


def model_free(v, measured: dict[str, tuple[float, float]]) -> Alternative | None:
    """Prompt lookup or suffix decoding: no model to run, so c is near 0 and α is all. `measured`: the
    drafts board's (α, c) per drafter; else the α they would need at c 0 with this v(k)."""
    said = [f"{name.replace('_', ' ')}: {best(a, c, v)[1]:.2f}× at α {a:.2f}, c {c:.2f} on the drafts board"
            for name, (a, c) in measured.items() if best(a, c, v)[1] >= PAYS]
    if said:
        return Alternative("prompt lookup or suffix decoding", "; ".join(said))
    if measured or v is None:  # measured and short of a gain; or no curve to say what α they would need
        return None
    need = break_even_alpha(0.0, v)
    if need is None:
        return None
    return Alternative("prompt lookup or suffix decoding",
                       f"no model to run, so c is about 0, and with this v(k) they pay from α {need:.2f}, which "
                       "text that repeats what came before reaches (code edits, quotes, retrieval)")


def self_drafting(v, layers: int, kept: int, measured: tuple[float, float] | None = None) -> Alternative | None:
    """The target drafting for itself with its first `kept` of `layers` layers: c about kept/layers
    (counted, not timed), or the drafts board's (α, c) where it measured it."""
    if measured is not None:
        a, c = measured
        gamma, speedup = best(a, c, v)
        return (Alternative("the target drafting for itself", f"{speedup:.2f}× at γ {gamma}, α {a:.2f} and c "
                                                              f"{c:.2f} on the drafts board") if speedup >= PAYS else None)
    c = kept / layers
    need = break_even_alpha(c, v) if v is not None else None
    if need is None:
        return None
    return Alternative("the target drafting for itself", f"with {kept} of its {layers} layers, c is about {c:.2f} "
                                                        f"(counted, not timed), and it pays from α {need:.2f}")


def bigger_targets(c: float, candidates: list[tuple[str, int]], target_bytes: int, free_bytes: int) -> Alternative | None:
    """Where the draft's step costs most of the target's (c from LAUNCH_BOUND_C), a bigger target costs
    more per step while the draft's stays, so c falls: the registry's models bigger than the target
    that fit the free memory, as (name, bytes) counted before loading."""
    if c < LAUNCH_BOUND_C:
        return None
    fits = sorted((b, n) for n, b in candidates if target_bytes < b <= free_bytes)
    if not fits:
        return None
    named = ", ".join(f"{n} ({b / 1e9:.1f} GB)" for b, n in fits)
    return Alternative("a bigger target", f"the draft's step costs {c:.2f} of this target's, so a bigger target "
                                          f"lowers c; {free_bytes / 1e9:.1f} GB are free for {named}")
