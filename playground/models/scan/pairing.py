"""Which scanned model can draft for which, and why: for a target, every other model is classed as a
draft that shares its tokenizer (drafts ids directly), one with another tokenizer (drafts through the
text, engine/universal.py), or one that cannot, with the reason.

Decided in this order, the first that applies giving the reason: the target or the draft does not load
here (its own reason from the scan), the draft is not smaller than the target (c = 1 or more: no γ
pays), the two do not fit this machine's memory together, then the tokenizers' fingerprints. Nothing is
loaded: a class, and the inputs of the estimate shown beside it (c from the two models' weight bytes,
α from the family in models.yaml or assumed), come from the scan's fields alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from playground.config import KNOBS
from playground.models import fits
from playground.models.scan.listing import Model

SAME, OTHER, NOT = "same tokenizer", "another tokenizer", "not usable"
ASSUMED_ALPHA = 0.7  # said as assumed wherever it is used: no family in models.yaml measured one


@dataclass(frozen=True)
class Memory:
    """What the fit check counts against: memory available now, and each model's build peak where its
    runner builds it first (an int4 ONNX build from a GGUF; engine/memory.build_peak, given by the caller)."""

    available: int
    device: str = "cpu"
    build_peak: Callable[[Model], int | None] = lambda model: None

    @classmethod
    def now(cls, device: str = "cpu", build_peak=None) -> Memory:
        return cls(fits.available_bytes(device), device, build_peak or (lambda model: None))


@dataclass(frozen=True)
class Pairing:
    target: str
    draft: str
    verdict: str  # SAME | OTHER | NOT
    why: str  # how it drafts, or why it cannot
    c: float | None = None  # the draft's weight bytes over the target's, as loaded (an estimate)
    alpha: float | None = None
    alpha_said: str = ""  # where α comes from: models.yaml's family, or assumed
    family: str | None = None  # the models.yaml pair whose α and knobs this pair takes

    @property
    def usable(self) -> bool:
        return self.verdict != NOT


def drafts_for(target: Model, models, registry, memory: Memory) -> list[Pairing]:
    """Every other model of the scan as a draft for `target`: usable ones first (same tokenizer first,
    then by c), then the others."""
    found = [pairing(target, m, registry, memory) for m in models if m.path != target.path]
    return sorted(found, key=lambda p: (p.verdict != SAME, p.verdict == NOT, p.c if p.c is not None else 9.0))


def pairing(target: Model, draft: Model, registry, memory: Memory) -> Pairing:
    def refused(why: str) -> Pairing:
        return Pairing(target.name, draft.name, NOT, why)

    if not target.usable:
        return refused(f"the target does not load here: {target.why}")
    if not draft.usable:
        return refused(draft.why)
    held = [held_bytes(target, memory), held_bytes(draft, memory)]
    c = held[1] / held[0]
    if c >= 1:
        return refused(f"not smaller than the target ({gb(held[1])} against {gb(held[0])} as loaded): c ≥ 1, no γ pays")
    need = fits.pair_need(held, [memory.build_peak(target), memory.build_peak(draft)])
    if need > memory.available:
        return refused(f"does not fit: the pair needs about {gb(need)} at its peak (weights as loaded, a build's "
                       f"peak, {gb(fits.ACTIVATIONS_BYTES)} for activations), {gb(memory.available)} are available")
    same = target.tokenizer is not None and target.tokenizer == draft.tokenizer
    family = family_pair(registry, target, draft) if same else None
    alpha, said = ASSUMED_ALPHA, "assumed"
    if family:
        alpha, said = family.alpha, f"models.yaml's pair {family.name!r} ({target.architecture} drafting {draft.architecture})"
    how = ("drafts token ids directly" if same else
           "drafts through the text, re-encoded in the target's tokens (its tokenizer differs"
           f"{'' if target.tokenizer and draft.tokenizer else ', or was not read'})")
    return Pairing(target.name, draft.name, SAME if same else OTHER, how, c, alpha, said,
                   family.name if family else None)


def held_bytes(model: Model, memory: Memory) -> int:
    return fits.held_bytes(model.format, model.bytes, model.parameters, memory.device)


def family_pair(registry, target: Model, draft: Model):
    """The models.yaml pair with a measured α whose models are of these two architectures (as their
    model packs note them), or None."""
    for spec in registry.pairs.values():
        if spec.alpha is None:
            continue
        archs = (architecture(registry.models[spec.target]), architecture(registry.models[spec.draft]))
        if archs == (target.architecture, draft.architecture):
            return spec
    return None


def architecture(spec) -> str:
    """A models.yaml model's architecture, from the catalog of the first model pack among its sources."""
    from playground.models.modelpack import load_catalog

    packs = load_catalog()
    for source in spec.sources:
        if source.kind == "pack" and source.ref in packs:
            return packs[source.ref].architecture
    return ""


def suggested_knobs(pair: Pairing, registry, draft: Model) -> dict:
    """The knobs a pair kept from the scan suggests: its family's in models.yaml (γ, temperature, the draft
    vocabulary where the draft shares the target's tokenizer and has more tokens than it, α so that γ
    follows this machine), else the run configuration's defaults and no α."""
    knobs = {name: KNOBS[name].default for name in ("gamma", "temperature", "draft_vocab")}
    if pair.family is None:
        return knobs
    family = registry.pair(pair.family)
    knobs.update(gamma=family.gamma, temperature=family.temperature, alpha=family.alpha)
    if pair.verdict == SAME and draft.vocab and family.draft_vocab < draft.vocab:
        knobs["draft_vocab"] = family.draft_vocab
    return knobs


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"
