"""The host's work around a static or compiled step (engine/runners/static.py, compiled.py): what it
launches to move the write position, and what it sends to the device. On a GPU each op is a kernel
launch and each blocking copy a wait; here they are counted by the ops torch dispatches."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from playground.engine.kvcache import CachedModel
from playground.engine.runners.eager import to_device
from playground.engine.runners.static import step
from playground.engine.tree import Tree
from playground.models.tiny import tiny_model

PROMPT = [(7 * i + 3) % 250 for i in range(40)]  # longer than the widest compiled step: it runs uncompiled
TREE = Tree(tokens=(5, 6, 7, 8, 9, 10, 11), parents=(-1, -1, 0, 1, 1, 4, 2))  # 7 nodes + 1: eight rows


class Ops(TorchDispatchMode):
    """Every op dispatched inside, by name, with its tensor inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, list[torch.Tensor], list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen.append((str(func), tensors(args), tensors([out])))
        return out


def tensors(values) -> list[torch.Tensor]:
    """The tensors among an op's arguments or outputs, those in lists (a foreach op's) included."""
    flat = [y for x in values for y in (x if isinstance(x, (list, tuple)) else [x])]
    return [x for x in flat if isinstance(x, torch.Tensor)]


def test_a_rollback_moves_every_layers_write_position_in_two_ops_at_the_same_addresses():
    """One fill_ per layer was a kernel launch each on every rollback (28 on the 1.5B); the counters stay
    where a compiled graph recorded them, each layer's its own, all at the new length."""
    target = tiny_model(259, 6, seed=5)
    lm = CachedModel(target, runner="static")
    lm.logits_for(PROMPT + [1, 2, 3, 4, 5], 5)
    counters = [layer.cumulative_length for layer in lm.runner.cache.layers]
    addresses = [c.data_ptr() for c in counters]
    with Ops() as ops:
        lm.rollback(len(PROMPT) + 2)
    assert len(ops.seen) <= 2, [name for name, _, _ in ops.seen]
    assert all(layer.cumulative_length is c for layer, c in zip(lm.runner.cache.layers, counters))  # the same tensors
    assert [c.data_ptr() for c in counters] == addresses and len(set(addresses)) == 6
    assert [int(c) for c in counters] == [len(PROMPT) + 2] * 6 == [lm.runner.length] * 6
    after = PROMPT + [1, 2, 9]  # a forward after the rollback writes where the counters say, in every layer
    assert torch.allclose(lm.logits_for(after, 1), CachedModel(target, runner="eager").logits_for(after, 1), atol=1e-5)


def uncompiled(monkeypatch):
    """The compiled runner's steps run as static.step itself: its logic (shapes, padding, the write
    position) without inductor, which compiles for no meta device and takes minutes on a CPU."""
    from playground.engine.runners import compiled

    monkeypatch.setattr(compiled, "compile_step", lambda name, mode, own_buffer: step)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


def forwards(lm: CachedModel) -> list:
    """A prompt, a one-row step, a verification of five rows (padded to eight), a tree and its kept path."""
    context = PROMPT + [1, 2, 3]
    return [lambda: lm.logits_for(PROMPT, 1), lambda: lm.logits_for(PROMPT + [1], 1),
            lambda: lm.logits_for(PROMPT + [1, 2, 3, 4, 5], 5), lambda: lm.logits_for_tree(context, TREE),
            lambda: lm.keep_path(len(context), [1, 3, 5])]


@pytest.mark.parametrize("runner", ["static", "compiled"])
def test_a_forward_sends_one_copy_of_its_rows_and_builds_nothing_as_wide_as_the_cache_on_the_host(runner, monkeypatch):
    """The model on the meta device, so what runs on the host (CPU tensors) and what crosses to the
    device (CPU in, meta out) show apart. The mask, [rows, capacity], was built on the host and copied
    with the ids and positions, three blocking copies a forward on CUDA; now one copy of the rows."""
    uncompiled(monkeypatch)
    lm = CachedModel(tiny_model(259, 2, seed=6).to("meta"), runner=runner)
    capacity = lm.runner.capacity
    for i, forward in enumerate(forwards(lm)):
        with Ops() as ops:
            forward()
        # (a copy inside torch.tensor(x, device=...) is not dispatched; the next test sees that one)
        crossing = [outs[0].numel() for _, ins, outs in ops.seen
                    if outs and outs[0].device.type == "meta" and any(t.device.type == "cpu" for t in ins)]
        widths = [t.shape[-1] for _, ins, outs in ops.seen for t in ins + outs if t.device.type == "cpu" and t.dim()]
        assert len(crossing) == 1 and crossing[0] <= 8 * (2 + 8), (runner, i, crossing)
        assert max(widths) < capacity, (runner, i, max(widths))  # the tree's pattern, its caller's, is 8 x 50


@pytest.mark.parametrize("runner", ["static", "compiled"])
def test_on_cuda_each_forward_sends_its_one_copy_from_pinned_memory_without_waiting(runner, monkeypatch):
    """A copy from pageable memory makes the host wait for the GPU; from pinned memory, non_blocking,
    it does not. The runner is told its device is CUDA; pinning and the copy to it are recorded."""
    uncompiled(monkeypatch)
    lm = CachedModel(tiny_model(259, 2, seed=6), runner=runner)
    monkeypatch.setattr(lm.runner, "device", torch.device("cuda"))
    pinned, sent, real_to = [], [], torch.Tensor.to

    def pin(tensor):
        pinned.append(tensor.clone())
        return pinned[-1]

    def to(tensor, *args, **kwargs):
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            sent.append((tensor, kwargs))
            return tensor
        return real_to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "to", to)
    for forward in forwards(lm):
        pinned.clear(), sent.clear()
        forward()
        assert len(sent) == 1 and sent[0][0] is pinned[-1] and sent[0][1] == {"non_blocking": True}


def test_a_tensor_stays_unpinned_where_the_device_is_not_cuda():
    host = torch.arange(6)
    assert to_device(host, torch.device("cpu")) is host


def test_a_compiled_step_whose_rows_are_all_real_leaves_the_write_position_to_the_step(monkeypatch):
    """The step moves every layer's write position past its rows; only pad rows need moving back from
    the host. A one-row draft step, and a verification that fills its shape, launch nothing more."""
    uncompiled(monkeypatch)
    target = tiny_model(259, 2, seed=6)
    lm, eager = CachedModel(target, runner="compiled"), CachedModel(target, runner="eager")
    for forward in forwards(lm)[:3]:
        forward()  # shapes 1 and 8 recorded: their first calls are not the steady steps counted below
    lm.rollback(len(PROMPT) + 1)
    moved, real = [], lm.runner.set_length
    monkeypatch.setattr(lm.runner, "set_length", lambda n: moved.append(n) or real(n))
    after = PROMPT + list(range(1, 14))
    for tokens, keep, expected in ((after[:42], 1, []), (after[:50], 8, []),  # one row; eight in the 8-row shape
                                   (after, 3, [len(after)])):  # three rows padded to eight: back over five
        moved.clear()
        assert torch.allclose(lm.logits_for(tokens, keep), eager.logits_for(tokens, keep), atol=1e-5)
        assert moved == expected and lm.runner.length == len(tokens)
        assert [int(layer.cumulative_length) for layer in lm.runner.cache.layers] == [len(tokens)] * 2
