"""Attention over what is filled (engine/runners/filled.py, static.py, compiled.py): a static or compiled
step reads the keys and values of the filled entries (compiled: their span, 256, 512, ... up to the
capacity), where they lie in the cache, never a copy over the whole capacity; its logits stay eager's
across the spans' boundaries; one compile serves every span at a capacity; the warm-up records each
span a run will meet, so none is recorded inside it; and eager's forwards on the same model stay
transformers' sdpa, bit for bit. On tiny float32 models built here (GQA: 4 query heads, 2 key heads)."""


import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from playground.config import RunConfig
from playground.engine import factory
from playground.engine.generate import generate
from playground.engine.kvcache import CachedModel
from playground.engine.runners import compiled, filled
from playground.engine.runners.compiled import steps_of
from playground.engine.runners.static import run_capacity, span_of, spans, step
from playground.engine.runners.warmup import run_capacities, warm_model
from playground.engine.tree import Tree
from playground.models.tiny import tiny_model

TOLERANCE = 1e-5
TREE = Tree(tokens=(5, 6, 7, 8, 9, 10, 11), parents=(-1, -1, 0, 1, 1, 4, 2))  # 7 nodes + 1: eight rows


def tokens(n: int) -> list[int]:
    return [(7 * i + 3) % 250 for i in range(n)]


def uncompiled(monkeypatch):
    """The compiled runner's steps run as static.step itself: its choice of shape and span, its padding
    and recordings, without inductor (which compiles for minutes on a CPU and calls no Python inside)."""
    monkeypatch.setattr(compiled, "compile_step", lambda name, mode, own_buffer: step)


class Attention:
    """What each scaled_dot_product_attention call of the static step reads: its query's and keys' shapes,
    and whether the keys are a view of the cache's own buffer (its storage) or a copy."""

    def __init__(self, monkeypatch, runner):
        self.seen: list[tuple[tuple, tuple, bool]] = []
        real = torch.nn.functional.scaled_dot_product_attention

        def sdpa(query, key, value, **kwargs):
            buffers = {layer.keys.untyped_storage().data_ptr() for layer in runner.cache.layers}
            self.seen.append((tuple(query.shape), tuple(key.shape), key.untyped_storage().data_ptr() in buffers))
            return real(query, key, value, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)

    def read(self, forward) -> tuple[set[int], torch.Tensor]:
        """The key lengths read (every layer's) by `forward`, run here, and what it returned: an eager
        runner's forward before it, on the same model, is not a static step's."""
        self.seen.clear()
        out = forward()
        assert all(own for _, _, own in self.seen) and all(key[1] == 2 for _, key, _ in self.seen)  # the cache's heads
        return {key[2] for _, key, _ in self.seen}, out


@pytest.fixture(scope="module")
def target():
    return tiny_model(259, 2, seed=21)


def test_the_spans_a_step_reads_lie_on_the_capacities_lattice():
    assert [span_of(n, 1024) for n in (1, 256, 257, 512, 513, 1024)] == [256, 256, 512, 512, 1024, 1024]
    assert span_of(20000, 24576) == 24576 and span_of(300, 256) == 256  # never past the capacity
    assert spans(241, 1024) == (256, 512, 1024) and spans(600, 1024) == (1024,) and spans(1, 256) == (256,)


@pytest.mark.parametrize("runner", ["static", "compiled"])
def test_attention_reads_what_is_filled_where_it_lies_and_gives_eagers_logits(target, runner, monkeypatch):
    """A run that grows past 256 and then 512 filled entries inside a 1024-entry cache: each step's
    attention reads the filled entries (static) or their span (compiled), from the cache's own buffer
    with its two key heads (no repeat_kv over the capacity), and its logits are eager's."""
    uncompiled(monkeypatch)
    eager, lm = CachedModel(target, runner="eager"), CachedModel(target, runner=runner)
    lm.runner.reserve(1024)
    seen = Attention(monkeypatch, lm.runner)
    context = tokens(250)
    read, logits = seen.read(lambda: lm.logits_for(context, 1))
    assert read == {250} and torch.allclose(eager.logits_for(context, 1), logits, atol=TOLERANCE)  # the prompt
    # (tokens added, what the static step reads: the entries filled after it, what the compiled one reads:
    # their span, its rows padded to 8 from 2 rows on, 250 rows uncompiled)
    for added, filled_after, span in ((1, 251, 256), (5, 256, 512), (6, 262, 512), (250, 512, 512), (3, 515, 1024)):
        grown = context + tokens(added + 7)[7:]
        keep = added if added <= 8 else 1
        read, logits = seen.read(lambda: lm.logits_for(grown, keep))
        assert torch.allclose(eager.logits_for(grown, keep), logits, atol=TOLERANCE), (runner, len(grown))
        assert read == {filled_after if runner == "static" else span}, (runner, len(grown))
        context = grown
    tree_context = context + [1, 2]  # two context tokens and seven nodes in one forward: 16 rows compiled
    read, logits = seen.read(lambda: lm.logits_for_tree(tree_context, TREE))
    assert torch.allclose(eager.logits_for_tree(tree_context, TREE), logits, atol=TOLERANCE)
    assert read == {len(tree_context) + len(TREE.tokens) if runner == "static" else 1024}
    assert lm.runner.capacity == 1024


def test_a_compiled_steps_span_follows_the_filled_length_and_a_rollback(target, monkeypatch):
    """The compiled step reads the span holding the entries after it, whatever the capacity: after a
    rollback to a short context it reads 256 entries again, not the 1024 it read before."""
    uncompiled(monkeypatch)
    lm = CachedModel(target, runner="compiled")
    lm.runner.reserve(1024)
    seen = Attention(monkeypatch, lm.runner)
    lm.logits_for(tokens(100), 1)
    lengths = []
    for n in (101, 300, 700, 120):  # steps of one row after contexts of n - 1 entries (a prompt, then rollbacks)
        if n < lm.runner.length:
            lm.rollback(n - 1)
        else:
            lm.logits_for(tokens(n - 1), 1)  # grows the context to n - 1 (uncompiled past 32 rows)
        lengths.append(seen.read(lambda: lm.logits_for(tokens(n), 1))[0])
    assert lengths == [{256}, {512}, {1024}, {256}]


class Made(TorchDispatchMode):
    """The largest tensor any op makes (not one it writes in place: the cache's own buffers), in elements."""

    def __init__(self, buffers: set[int]):
        super().__init__()
        self.buffers, self.largest = buffers, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.buffers:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("rows", [1, 5])
def test_no_step_copies_keys_or_values_over_the_capacity(target, rows, monkeypatch):
    """transformers' sdpa path repeated each key and value head for its query heads, over the whole cache,
    in every layer (a tensor [1, 4, 1024, 16] here): no tensor a compiled step makes holds as many
    elements as one layer's keys, [1, 2, 1024, 16]."""
    uncompiled(monkeypatch)
    lm = CachedModel(target, runner="compiled")
    lm.runner.reserve(1024)
    lm.logits_for(tokens(300), 1)
    lm.logits_for(tokens(300 + rows), rows)  # the shape's first calls (its "compile and record")
    lm.rollback(300)
    buffers = {t.untyped_storage().data_ptr() for layer in lm.runner.cache.layers for t in (layer.keys, layer.values)}
    with Made(buffers) as made:
        lm.logits_for(tokens(300 + rows), rows)
    assert 0 < made.largest < lm.runner.cache.layers[0].keys.numel(), made.largest


def test_one_compile_serves_every_span_at_a_capacity_and_gives_eagers_logits():
    """inductor, for real: the step's span is a dynamic size, so one-row steps reading 256, 512 and 1024
    entries compile the step once and never recompile; a graph is recorded per span on the cache."""
    model = tiny_model(259, 2, seed=27)  # its own: the other tests' stand-in steps are not compiled ones
    lm, eager = CachedModel(model, runner="compiled"), CachedModel(model, runner="eager")
    lm.runner.reserve(1024)
    for n in (200, 201):  # the prompt (uncompiled), then the first compiled step: the compile
        assert torch.allclose(eager.logits_for(tokens(n), 1), lm.logits_for(tokens(n), 1), atol=TOLERANCE)
    frames = dict(torch._dynamo.utils.counters["frames"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        for n in (202, 300, 301, 600, 601, 700, 701):  # 300, 600 and 700: leaps of many rows, uncompiled
            assert torch.allclose(eager.logits_for(tokens(n), 1), lm.logits_for(tokens(n), 1), atol=TOLERANCE), n
    assert dict(torch._dynamo.utils.counters["frames"]) == frames  # nothing compiled after the first step
    key = lm.runner.key(1)
    assert list(steps_of(model).seconds) == [key]  # one compile for the three spans
    assert {span for k, span, address in steps_of(model).recorded if k == key and address == lm.runner.address} \
        == {256, 512, 1024}


def test_the_warm_up_records_every_span_a_run_meets_so_none_records_inside_it(monkeypatch):
    """A prompt of 300 tokens and 300 new: a 1024-entry cache, read at 512 then 1024 entries; both are
    recorded on each cache before the run, and the run records nothing (Steps.while_running)."""
    uncompiled(monkeypatch)
    model = tiny_model(259, 2, seed=22)
    run = RunConfig(pair="tiny", runner="compiled", max_new_tokens=300)
    caps = run_capacities(run, 300)
    assert caps == (run_capacity(600),) == (1024,)
    events = [e for e in warm_model(model, (1,), None, caps, copies=2, prompt_tokens=300) if e.done]
    assert [(e.rows, e.capacity, e.reads) for e in events] == [(1, 1024, 512), (1, 1024, 1024)] * 2
    before = steps_of(model).while_running
    ran = list(generate(model, tokens(300), factory.spec_config(run)))
    assert len(ran) >= 250 and steps_of(model).while_running == before
    assert {span for _, span, _ in steps_of(model).recorded} == {512, 1024}
    assert list(warm_model(model, (1,), None, caps, copies=2, prompt_tokens=300)) == []  # kept: nothing twice


def test_a_span_the_warm_up_left_out_reads_further_rather_than_records_inside_a_run(monkeypatch):
    """Warmed without the prompt's length, a cache has its whole capacity's span alone: a step that
    would read 256 entries reads the 1024 recorded rather than record a graph inside the run."""
    uncompiled(monkeypatch)
    model = tiny_model(259, 2, seed=23)
    list(warm_model(model, (1,), None, (1024,)))
    lm = CachedModel(model, runner="compiled")
    lm.runner.reserve(1024)
    before = steps_of(model).while_running
    lm.logits_for(tokens(40), 1)
    assert lm.runner.span_for(1) == 1024
    lm.logits_for(tokens(41), 1)
    assert steps_of(model).while_running == before


def test_eagers_forwards_on_the_same_model_stay_transformers_sdpa(monkeypatch):
    """The static runner puts filled_attention in the model's sdpa's place; every forward it does not
    mark (an eager runner's: a chain's causal mask, a tree's 4D one) computes exactly what sdpa did."""
    model = tiny_model(259, 2, seed=24)
    eager = CachedModel(model, runner="eager")
    context = tokens(60)
    before = [eager.logits_for(context, 1), eager.logits_for(context + [1, 2, 3, 4], 4),
              eager.logits_for_tree(context + [5], TREE)]
    assert model.config._attn_implementation == "sdpa"
    CachedModel(model, runner="static")
    assert model.config._attn_implementation == filled.FILLED
    eager = CachedModel(model, runner="eager")
    after = [eager.logits_for(context, 1), eager.logits_for(context + [1, 2, 3, 4], 4),
             eager.logits_for_tree(context + [5], TREE)]
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_a_model_on_eager_attention_keeps_it_and_its_static_steps_read_the_whole_cache(monkeypatch):
    """filled_attention stands in for sdpa only; a model on transformers' eager attention (which takes
    no narrower mask) keeps it, its masks as wide as the cache, and its logits stay eager's."""
    uncompiled(monkeypatch)
    model = tiny_model(259, 2, seed=25)
    model.config._attn_implementation = "eager"
    lm, eager = CachedModel(model, runner="compiled"), CachedModel(model, runner="eager")
    assert not lm.runner.filled and model.config._attn_implementation == "eager"
    context = tokens(40)
    for grown, keep in ((context, 1), (context + [1], 1), (context + [1, 2, 3, 4, 5], 5)):
        assert torch.allclose(eager.logits_for(grown, keep), lm.logits_for(grown, keep), atol=TOLERANCE)
    assert lm.runner.span_for(1) == lm.runner.capacity


def test_the_hybrid_is_held_to_steps_recorded_at_the_whole_capacity(monkeypatch):
    """A step recorded at a shorter span alone cannot serve a longer context; ready_rows counts the steps
    recorded at the capacity's span, which serve any."""
    uncompiled(monkeypatch)
    model = tiny_model(259, 2, seed=26)
    list(warm_model(model, (1, 8), None, (1024,), prompt_tokens=200))  # 8 rows: at 256, 512 and 1024
    runner = CachedModel(model, runner="compiled").runner
    runner.reserve(1024)
    assert runner.ready_rows() == 8
    runner.steps.recorded = {on for on in runner.steps.recorded if not (on[0][0] == 8 and on[1] == 1024)}
    assert runner.ready_rows() == 1
