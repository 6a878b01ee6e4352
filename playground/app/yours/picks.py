"""What the Your models tab works out about a pick, apart from its layout and handlers: the list of
targets, the machine's memory for the fit, the pairing and its estimate, how each model runs here, the
last race of it, the pick registered in the app's registry, and the name suggested to keep it under."""

from __future__ import annotations

from playground.app.shared.context import AppContext
from playground.app.yours import tables


def pairing_shown(ctx: AppContext, chosen, models, measured=None) -> str:
    """The pick's class and why, its estimate or what a race measured, and how each model runs here."""
    if not chosen.usable:
        return tables.pairing_html(chosen, None)
    return tables.pairing_html(chosen, estimate_of(ctx, chosen), measured) + tables.runs_html(models, memory())



def targets(found) -> list[str]:
    """The usable models, biggest first: a target is the big model whose output you want."""
    return [m.name for m in sorted(found.usable(), key=lambda m: -(m.parameters or m.bytes))]



def named(ctx: AppContext, name: str | None):
    try:
        return ctx.found.named(name) if ctx.found is not None and name else None
    except ValueError:
        return None



def memory():
    """This machine's memory for the fit check, each GGUF's build peak where the onnxruntime runner builds it."""
    import torch

    from playground.engine.memory import build_peak
    from playground.models.scan.pairing import Memory

    def peak(model):
        return build_peak(model.path, model.architecture) if model.format == "gguf" else None

    return Memory.now("cuda" if torch.cuda.is_available() else "cpu", peak)



def pairing_of(ctx: AppContext, target, draft):
    from playground.models.scan.pairing import pairing

    return pairing(target, draft, ctx.registry, memory())



def estimate_of(ctx: AppContext, chosen):
    """The estimate, with the target's v(k) where this app run measured it (Theory, a race, a followed γ),
    else the curve this machine kept for a model of the target's shape at the quantization it would load
    with, said as such (any runner: the kept one names its own), else v assumed 1."""
    from playground.engine.estimate import estimate

    curve = ctx.costs.target_curve(chosen.target)
    if curve is not None:
        return estimate(chosen.alpha, chosen.alpha_said, chosen.c, curve)
    kept = kept_curve(ctx, named(ctx, chosen.target))
    return estimate(chosen.alpha, chosen.alpha_said, chosen.c, kept and kept.curve, kept.said() if kept else "")



def kept_curve(ctx: AppContext, target):
    """The curve kept on this machine (measure/bench/curve_store.py) for a model of the scanned target's
    shape on this device, at the quantization it loads with here (userpairs.load_as, auto resolved as
    the loader resolves it); None where none was kept or the shape is not known."""
    import torch

    from playground.config import AUTO_QUANTIZATION
    from playground.models.shape import of_scanned
    from playground.models.userpairs import load_as

    shape = of_scanned(target) if target is not None else None
    if shape is None:
        return None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    quantization = load_as(target)[0]
    return ctx.costs.stored(shape, device, AUTO_QUANTIZATION[device] if quantization == "auto" else quantization)



def pick(ctx: AppContext, name: str, chosen, target, draft) -> None:
    """The pick registered in this app's registry under `name` (not kept: nothing written)."""
    from playground.models.scan.pairing import suggested_knobs
    from playground.models.userpairs import picked

    if name in ctx.registry.pairs and name not in ctx.picks:
        raise ValueError(f"pair: {name!r} is already the name of a pair; keep this one under another name")
    knobs = suggested_knobs(chosen, ctx.registry, draft)
    ctx.picks[name] = picked(name, target, draft, knobs, f"{target.name} drafted by {draft.name} ({chosen.verdict}; "
                             "picked from the scan, not kept)", config=ctx.config)
    ctx.refresh()



def last_race(ctx: AppContext, session, target: str, draft: str):
    """The latest point this session measured on a pair of these two models (raced here, or in any tab
    under a kept name), or None."""
    names = {n for n, p in ctx.registry.pairs.items() if (p.target, p.draft) == (target, draft)}
    points = [p for p in ctx.measurements.get(session) if p.pair in names and not p.draft]
    return points[-1] if points else None



def suggested_name(target: str, draft: str) -> str:
    """A name to keep the pair under: the two models' names, shortened, without characters YAML or a
    shell would quote."""
    short = [n.split("/")[-1].split("@")[0].replace(":", "-").replace(" ", "-") for n in (target, draft)]
    return f"{short[0]}+{short[1]}"[:64]



def kept_html(ctx: AppContext) -> str:
    from playground.models.userpairs import status

    return tables.kept_html(ctx.registry, ctx.picks, status)
