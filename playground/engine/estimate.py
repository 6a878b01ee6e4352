"""A pair's speedup estimated before anything loads: the formula (engine/sampling.expected_speedup) at
the best γ for α, c and v(k), each said with where it came from, so the page and the command line show
an estimate as one, until a race measures the pair.

c comes from the two models' weight bytes as loaded (decoding one token reads every weight once, so
the byte ratio is what a draft step costs where memory bandwidth decides; on a CPU with few cores the
measured c is often higher). v(k) is this machine's measured curve for the target where one was
measured (the Theory tab, a pair's γ followed at load), or the curve this machine kept for a model of
the same shape, runner and quantization (measure/bench/curve_store.py, across starts), else 1, the
paper's, said as assumed: on such a CPU verification costs more, so the estimate then errs high. α is the family's in models.yaml or an
assumed 0.7 (models/scan/pairing.py).

It sits beside the formula, in the engine, so the scan (models/) and the pages and benchmark above it
(measure/, app/) all reach it downward.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_GAMMA = 6  # the longest chain the best γ is sought up to: v(k) is measured to 7 rows (past it no CPU measured here pays)


@dataclass(frozen=True)
class Estimate:
    gamma: int  # the formula's best γ (1..MAX_GAMMA)
    speedup: float  # the formula's speedup at that γ
    alpha: float
    alpha_said: str  # "models.yaml's pair 'default' (...)" or "assumed"
    c: float  # from weight bytes
    v: tuple[float, ...] | None  # the target's measured v(1..k), or None: assumed 1
    v_said: str

    def line(self) -> str:
        alpha = f"α {self.alpha:.2f} ({self.alpha_said})"
        v = f"v(k) {self.v_said}"
        return (f"estimate {self.speedup:.2f}× at γ {self.gamma}: {alpha}, c {self.c:.2f} from the weights' bytes, {v}"
                + ("; no γ pays by the formula" if self.speedup <= 1.0 else ""))


def estimate(alpha: float, alpha_said: str, c: float, curve=None, curve_said: str = "") -> Estimate:
    """The formula's best γ and speedup at α and c; `curve` a VerifyCurve measured for the target on this
    machine, or None (v = 1, assumed); `curve_said`, where the curve came from when not this run's
    measurement of the target itself (a kept curve of a model of the same shape)."""
    from playground.engine.sampling import best_gamma, expected_speedup  # torch: not at import

    v = tuple(curve.v) if curve is not None else None
    # a step after an all-accepted call reads two rows in the draft (sampling.draft_cost); with no draft
    # timed, its second row is taken to cost what the target's does against one (the default pair: 0.24, 0.27)
    steps = (c, c * v[1] / v[0]) if v and len(v) > 1 else c
    gamma = max(1, best_gamma(alpha, steps, MAX_GAMMA, v))
    said = ((curve_said or f"measured here to k = {len(v)}") if v else "assumed 1 (not measured for this target here; on a CPU with "
            "few cores it is higher, and the estimate high)")
    return Estimate(gamma, expected_speedup(alpha, gamma, steps, v), alpha, alpha_said, c, v, said)
