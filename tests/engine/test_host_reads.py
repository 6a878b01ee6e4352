"""Host reads per speculative step, counted on the CPU as a stand-in for the GPU.

On a GPU every read of a tensor's value on the host (.item(), .tolist(), float(), int(), a Python
`if` on a tensor, .cpu(), .numpy()) waits for the device. A step needs about one read per draft
token (the drafter picks it on the host) and one for the verdict, and describing the step for a
viewer costs one transfer more. Counted here by wrapping those methods around single engine steps.
"""

import pytest
import torch

from playground.engine.drafters import ModelDrafter
from playground.engine.generate import SpecConfig, begin, start, step

READS = ("item", "tolist", "__float__", "__int__", "__bool__", "cpu", "numpy")
GAMMA = 3
PROMPT = [5, 17, 40, 3, 99, 12, 7, 61]


class Reads:
    """Counts host reads of tensor values while `counting` is set."""

    def __init__(self, monkeypatch):
        self.count, self.counting = 0, False
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self.wrapped(getattr(torch.Tensor, name)))

    def wrapped(self, original):
        def read(tensor, *args, **kwargs):
            if self.counting:
                self.count += 1
            return original(tensor, *args, **kwargs)
        return read

    def per_step(self, state, steps: int) -> list[int]:
        """Reads of each of `steps` engine steps after the first (the first also reads the prompt)."""
        context = list(PROMPT)
        counts = []
        for i in range(steps + 1):
            self.count, self.counting = 0, i > 0
            event = step(state, context, GAMMA, room=100)
            self.counting = False
            context += list(event.emitted)
            if i > 0:
                counts.append(self.count)
        return counts


def run_state(pair, drafter, **knobs):
    target, _, _ = pair
    state = start(target, drafter, SpecConfig(gamma=GAMMA, runner="eager", **knobs))
    begin(state, PROMPT)
    return state


def test_a_greedy_chain_step_reads_the_host_at_most_gamma_plus_two_times(pair, monkeypatch):
    reads = Reads(monkeypatch)
    state = run_state(pair, ModelDrafter(pair[1], runner="eager"))
    counts = reads.per_step(state, 6)
    assert max(counts) <= GAMMA + 2, counts


@pytest.mark.parametrize("knobs", [dict(temperature=1.0), dict(temperature=0.8, top_k=20)])
def test_a_sampled_chain_step_reads_the_host_at_most_gamma_plus_four_times(pair, monkeypatch, knobs):
    reads = Reads(monkeypatch)
    state = run_state(pair, ModelDrafter(pair[1], runner="eager"), seed=3, **knobs)
    counts = reads.per_step(state, 6)
    assert max(counts) <= GAMMA + 4, counts


def test_a_plain_step_reads_the_host_at_most_twice(pair, monkeypatch):
    reads = Reads(monkeypatch)
    counts = reads.per_step(run_state(pair, None), 4)
    assert max(counts) <= 2, counts


def test_the_count_sees_a_read_the_engine_would_add(pair, monkeypatch):
    """The counter is not blind: a float() per drafted token, as describe once made, shows."""
    from playground.engine import describe

    original = describe.read_at

    def one_read_per_value(device, picks):
        values = original(device, picks)
        for rows, tokens in picks:
            for i, token in enumerate(tokens):
                float(rows[i, token])
        return values

    monkeypatch.setattr(describe, "read_at", one_read_per_value)
    reads = Reads(monkeypatch)
    counts = reads.per_step(run_state(pair, ModelDrafter(pair[1], runner="eager")), 4)
    assert max(counts) > GAMMA + 2, counts


# -- the engine's own tensor work on one torch thread where the forwards run elsewhere ----------

def cached(name):
    """What the engine reads of a cached model here: its runner's name."""
    from types import SimpleNamespace

    return SimpleNamespace(runner=SimpleNamespace(name=name))


@pytest.mark.parametrize("target, draft, one", [("onnxruntime", "onnxruntime", True), ("llamacpp", None, True),
                                                ("onnxruntime", "eager", False), ("eager", None, False)])
def test_a_step_runs_torch_on_one_thread_only_where_every_forward_runs_outside_it(monkeypatch, target, draft, one):
    """ONNX Runtime's pool and torch's spinning OpenMP workers took turns on 2 cores; a step whose
    forwards are all ONNX Runtime's or llama.cpp's keeps torch to one thread, and gives back the rest.
    The draft model is found inside a hybrid drafter too."""
    from types import SimpleNamespace

    from playground.engine import generate as engine
    from playground.engine.hybrid import HybridDrafter

    seen = []
    monkeypatch.setattr(engine, "one_step", lambda *args: seen.append(torch.get_num_threads()))
    free = SimpleNamespace(speculation="chain", vocab_size=None, device=None)  # a drafter with no model
    drafter = None if draft is None else HybridDrafter(free, SimpleNamespace(**vars(free), lm=cached(draft)))
    state = SimpleNamespace(lm=cached(target), drafter=drafter)
    state.one_thread = engine.outside_torch(state.lm, drafter)  # as start() asks it
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine.step(state, [1], 3, 10)
        assert seen == [1 if one else 2] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_run_outside_torch_holds_one_thread_between_its_steps_and_gives_it_back(pair, monkeypatch):
    """While such a run waits at a yield its caller's torch ops run on one thread too (OpenMP workers
    spinning after a parallel op took the cores from the next forward); the thread count comes back
    when the run ends or is closed, and a run on torch's own kernels is left alone."""
    from playground.engine import generate as engine

    target, draft, _ = pair
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for outside, inside in ((True, 1), (False, 2)):
            monkeypatch.setattr(engine, "outside_torch", lambda lm, drafter: outside)
            run = engine.generate(target, PROMPT, SpecConfig(max_new_tokens=4, gamma=2, runner="eager"),
                                  ModelDrafter(draft, runner="eager"))
            next(run)
            assert torch.get_num_threads() == inside  # the caller's turn, between two steps
            run.close()
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
