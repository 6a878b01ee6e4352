"""The host's work around a static or compiled step (engine/runners/static.py, compiled.py): what it
launches to move the write position, and what it sends to the device. On a GPU each op is a kernel
launch and each blocking copy a wait; here they are counted by the ops torch dispatches."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from playground.engine.kvcache import CachedModel
from playground.models.tiny import tiny_model

PROMPT = [(7 * i + 3) % 250 for i in range(40)]


class Ops(TorchDispatchMode):
    """Every op dispatched inside, by name, with its tensor inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, list[torch.Tensor], list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = lambda xs: [x for x in xs if isinstance(x, torch.Tensor)]
        flat_args = [y for x in args for y in (x if isinstance(x, (list, tuple)) else [x])]
        self.seen.append((str(func), tensors(flat_args), tensors(out if isinstance(out, (list, tuple)) else [out])))
        return out


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
    assert [layer.cumulative_length for layer in lm.runner.cache.layers] == counters  # the same tensors
    assert [c.data_ptr() for c in counters] == addresses and len(set(addresses)) == 6
    assert [int(c) for c in counters] == [len(PROMPT) + 2] * 6 == [lm.runner.length] * 6
    after = PROMPT + [1, 2, 9]  # a forward after the rollback writes where the counters say, in every layer
    assert torch.allclose(lm.logits_for(after, 1), CachedModel(target, runner="eager").logits_for(after, 1), atol=1e-5)
