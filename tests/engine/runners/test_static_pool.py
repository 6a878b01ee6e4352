"""The static runner's caches (engine/runners/static.py): how far a cache grows for a context, and what a
model's pool keeps once a run is over. On a fresh tiny target, so its pool starts empty."""

import gc

import pytest

from playground.engine.kvcache import CachedModel
from playground.engine.runners.static import DOUBLE_UNTIL, MIN_CAPACITY, grown, pool_of
from playground.engine.runners.warmup import capacities
from playground.models.tiny import tiny_pair


def prompt(n: int) -> list[int]:
    return [(7 * i + 3) % 250 for i in range(n)]


@pytest.mark.parametrize("n, capacity", [
    (1, 256), (257, 512), (600, 1024), (16384, 16384),
    (17000, 24576),  # past 16k: 8k more, not doubled to 32k
    (24577, 32768), (40000, 40960),
])
def test_a_cache_doubles_up_to_16k_entries_then_grows_8k_at_a_time(n, capacity):
    assert grown(MIN_CAPACITY, n) == capacity
    assert grown(capacity, n) == capacity  # already holds it: no growth


def test_the_warm_up_compiles_the_capacities_a_run_grows_through():
    assert capacities(0, 600) == (256, 512, 1024)
    assert capacities(16000, 17000) == (256, 16384, 24576)
    assert all(grown(c, c + 1) in capacities(0, 50000) for c in capacities(0, 40000))
    assert DOUBLE_UNTIL == 16384


def test_the_pool_lets_go_of_longer_caches_when_a_run_ends_and_keeps_those_it_stepped_in():
    """A long run's 1024-entry cache stays while it is the last run's; after a shorter run only what
    that one stepped in remains, so memory follows the last run, not the longest since the pair loaded."""
    target = tiny_pair(seed=3)[0]
    pool = pool_of(target)
    long = CachedModel(target, runner="static")
    long.logits_for(prompt(600), 1)
    assert long.runner.capacity == 1024 and pool.capacities() == [256]  # the first cache back, mid-run
    del long
    gc.collect()
    assert pool.capacities() == [256, 1024]  # the run just over stepped in both
    short = CachedModel(target, runner="static")
    short.logits_for(prompt(40), 1)
    del short
    gc.collect()
    assert pool.capacities() == [256]
    again = CachedModel(target, runner="static")
    again.logits_for(prompt(300), 1)
    assert again.runner.capacity == 512 and pool.capacities() == [256]
