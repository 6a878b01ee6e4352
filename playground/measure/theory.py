"""Measuring one point for the theory view: a warm-up, then baseline and speculative runs alternated
(the bench's own measure_prompt), with a token tree from the same draft beside the chain; and the
points of one pair, drafter and temperature pooled into the α and c the formula is fed.

The Theory and Lesson tabs both measure through this module, so neither reaches into the other.
"""

from __future__ import annotations

from playground.config import MODEL, RunConfig
from playground.measure.points import Point, Pooled, point_from_record, pool


def measure_point(
    pair, ids: list[int], settings: RunConfig, repeats: int, report, source: str, prompt: str
) -> Point:
    """Warm up, then time baseline and speculative runs alternated (bench.measure), as one point.

    report(done, total, what) is called after each run (the lockstep worker's callback)."""
    from playground.engine import factory
    from playground.measure.machine import spare_a_core
    from playground.measure.runs import Setup, measure_prompt, warm_up

    config = factory.spec_config(settings)
    setup = Setup.of(pair, settings, tree=settings.drafter == MODEL)  # a tree's length beside the chain's
    total = (3 if setup.tree else 2) * repeats + 1
    with spare_a_core():  # as in the race: the page keeps a core, so drawing never stalls the models
        warm_up(setup, ids, config, 1)
        report(1, total, "warm-up")
        record = measure_prompt(
            setup, ids, config, repeats, lambda method, done, _: report(1 + done, total, method)
        )
    return point_from_record(
        record,
        pair=settings.pair,
        drafter=settings.drafter,
        temperature=settings.temperature,
        gamma=settings.gamma,
        source=source,
        prompt=prompt,
        tree_shape=(settings.tree_budget, settings.tree_depth, settings.tree_branching, settings.tree_width),
    )


def matching(points: list[Point], pair: str, drafter: str, temperature: float) -> list[Point]:
    """The points of this pair, drafter and temperature: α depends on all three, c on the first two."""
    return [
        p for p in points if p.pair == pair and p.drafter == drafter and p.temperature == float(temperature)
    ]


def pooled_for(
    points: list[Point], pair: str, drafter: str, temperature: float
) -> tuple[list[Point], Pooled | None]:
    """The matching points and their pooled α, c and v (None without a measured draft)."""
    chosen = matching(points, pair, drafter, temperature)
    return chosen, pool(chosen)
