"""The static runner's caches (engine/runners/static.py): how far a cache grows for a context, and what a
model's pool keeps once a run is over. On a fresh tiny target, so its pool starts empty."""

import gc

import pytest

from playground.engine.kvcache import CachedModel
from playground.config import RunConfig
from playground.engine import factory
from playground.engine.generate import generate
from playground.engine.runners.static import DOUBLE_UNTIL, MIN_CAPACITY, WIDEST_STEP, grown, pool_of, run_capacity
from playground.engine.runners.warmup import run_capacities
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


def test_a_run_takes_the_one_capacity_that_holds_it_and_the_warm_up_compiles_that_one():
    assert run_capacity(600) == 1024 and run_capacity(17000) == 24576 and DOUBLE_UNTIL == 16384
    assert run_capacity(256 - WIDEST_STEP) == 256 and run_capacity(256 - WIDEST_STEP + 1) == 512  # a padded step's room
    run = RunConfig(pair="tiny", max_new_tokens=96)
    assert run_capacities(run, 500) == (1024,) and run_capacities(run, None) == (MIN_CAPACITY,)


def test_a_run_steps_in_one_cache_from_its_start_to_its_end():
    """The capacity is taken when the run begins, from its prompt and max_new_tokens, so a long run
    never grows its cache halfway (a compiled runner would meet a capacity it has no step for)."""
    target = tiny_pair(seed=4)[0]
    run = RunConfig(pair="tiny", runner="static", max_new_tokens=40)
    events = generate(target, prompt(230), factory.spec_config(run))
    seen = set()
    for _ in events:  # the run's own cache, read from the generator's state at every step
        seen.add(events.gi_frame.f_locals["state"].lm.runner.capacity)
    assert seen == {run_capacity(230 + 40)} == {512}


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
