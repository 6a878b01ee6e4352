"""The static runner: a StaticCache of fixed capacity, so a step never allocates and rollback is
moving an integer (the rejected entries stay in the buffer, behind the mask, until overwritten).

Every forward passes explicit position ids and a 4D mask as wide as what its attention reads: the
entries filled so far and its own (uncompiled), or the span of a short lattice holding them (compiled:
`span_of`); transformers takes a 4D mask as given, and the model's attention (filled.py) reads the
cache's keys and values up to the mask's width, its heads where they lie, though a static layer
returns all of its rows (a model on another attention than sdpa reads them all, its masks as wide as
the cache). What the host sends is one small tensor a forward, a row per new token (`rows_of`); the
mask is made from it on the device (`visible`), so nothing as wide as the cache is built on the host
or copied over. The capacity grows when a run needs more (the entries so far copied over), so no
caller has to size it: it doubles up to 16k entries, then grows 8k at a time (`grown`); a compiled
step is built per capacity, which this keeps to a few. A model's caches are pooled across runs
(`CachePool`); when a run ends the pool lets go of those longer than the one it ended with.
"""

from __future__ import annotations

import threading
import weakref

import torch
from transformers import StaticCache

from playground.engine.runners import module_of
from playground.engine.runners.eager import additive_mask, to_device
from playground.engine.runners.filled import attends_filled

MIN_CAPACITY = 256  # a prompt and 96 new tokens fit; the shortest span a compiled step reads (span_of)
# Past this a cache grows by LINEAR_STEP entries instead of doubling: doubled, 17k tokens would hold
# 32k entries (1 GB more than 24k for Llama 3.1 8B in bf16); linear, 24k. More capacities, each compiled once.
DOUBLE_UNTIL = 16384
LINEAR_STEP = 8192
WIDEST_STEP = 32  # rows the compiled runner's widest padded step writes past the run's last token
SPARE = 1  # entries each buffer holds past its capacity, never filled: a span a step reads is never a whole
# buffer, so the keys it reads are a strided view at every span (a view as long as its buffer is contiguous,
# and inductor guards on that: the capacity's span compiled the step again)


class StaticRunner:
    name = "static"

    def __init__(self, model, head=None):
        self.model, self.head, self.device = module_of(model), head, model.device  # the pool stays the handle's
        self.pool = pool_of(model)
        self.filled = attends_filled(self.model)  # its attention reads as far as a step's mask spans
        self.cache = self.pool.take(MIN_CAPACITY)
        self.finalizer = weakref.finalize(self, self.pool.ended, self.cache)  # the run is over
        self.set_length(0)  # a pooled cache still points where its last runner left it

    @property
    def capacity(self) -> int:
        return capacity_of(self.cache)

    def reset(self) -> None:
        self.crop(0)

    def crop(self, n: int) -> None:
        if self.length > n:
            self.set_length(n)

    def set_length(self, n: int) -> None:
        """Where the next forward writes, in every layer: in place, so the counters keep the addresses a
        compiled graph reads them at, and in two ops whatever the layer count (a fill_ per layer was a
        kernel launch each, 28 on the 1.5B, at every rollback). Each layer keeps a counter of its own:
        transformers' StaticLayer.update advances its counter in place by the rows it writes, so one
        tensor shared by the layers would move once per layer in a forward."""
        lengths = [layer.cumulative_length for layer in self.cache.layers]
        torch._foreach_zero_(lengths)
        torch._foreach_add_(lengths, n)
        self.length = n

    def move(self, prefix: int, picks: list[int]) -> None:
        if not picks:
            return
        index = to_device(torch.tensor(picks), self.device)
        for layer in self.cache.layers:
            layer.keys[..., prefix : prefix + len(picks), :] = layer.keys.index_select(-2, index)
            layer.values[..., prefix : prefix + len(picks), :] = layer.values.index_select(-2, index)

    def forward(self, new: list[int], positions, allowed, keep: int) -> torch.Tensor:
        self.reserve(self.length + len(new))
        rows = to_device(rows_of(new, positions, allowed, self.length), self.device)
        logits = step(self.model, self.head, self.cache, rows, keep, self.reach(self.length + len(new)))
        self.length += len(new)
        return logits

    def reach(self, span: int) -> torch.Tensor:
        """[span] (int64, on the device): the positions of the entries a step's attention reads, 0 to
        span - 1; all of the buffer's where the model's attention reads them all (filled.attends_filled)."""
        return self.pool.positions(span if self.filled else self.capacity + SPARE)

    def expect(self, entries: int) -> None:
        """A run of this many entries (prompt and new tokens) starts: its cache taken at the one capacity
        that holds it all (run_capacity), so the run never grows it, and the compiled runner meets one
        capacity a run, the one the warm-up compiled, instead of a second one halfway."""
        if self.length == 0:
            self.reserve(run_capacity(entries))

    def reserve(self, n: int) -> None:
        """Room for n entries: a cache twice as long (or more) with the current entries copied in."""
        if n <= self.capacity:
            return
        bigger = self.pool.take(grown(self.capacity, n))
        for old, new in zip(self.cache.layers, bigger.layers):
            new.keys[..., : self.length, :] = old.keys[..., : self.length, :]
            new.values[..., : self.length, :] = old.values[..., : self.length, :]
        self.finalizer.detach()
        self.pool.give(self.cache)  # the old one back to the pool, kept: the next run steps in it too
        self.cache = bigger
        self.finalizer = weakref.finalize(self, self.pool.ended, bigger)
        self.set_length(self.length)


def grown(capacity: int, n: int) -> int:
    """The capacity a cache of `capacity` entries grows to when n must fit: doubled up to DOUBLE_UNTIL,
    then LINEAR_STEP entries at a time (so any growth lands on the same few capacities)."""
    while capacity < n:
        capacity = capacity * 2 if capacity < DOUBLE_UNTIL else capacity + LINEAR_STEP
    return capacity


def run_capacity(entries: int) -> int:
    """The capacity a run of `entries` tokens steps in from its start: room for them and the widest
    padded step after the last, on grown()'s lattice (256, 512, ...), so runs of similar lengths share
    one compiled capacity."""
    return grown(MIN_CAPACITY, entries + WIDEST_STEP)


def capacity_of(cache: StaticCache) -> int:
    """The entries a cache holds for a run: its buffers' length less the SPARE one."""
    return cache.layers[0].max_cache_len - SPARE


def span_of(entries: int, capacity: int) -> int:
    """How far a compiled step's attention reads when `entries` are filled after it: the shortest span of
    grown()'s lattice (256, 512, ... as capacities are) that holds them, at most the capacity. At most
    twice the filled length, and few: a compiled step records a CUDA graph per span it reads."""
    return min(grown(MIN_CAPACITY, entries), capacity)


def spans(entries: int, capacity: int) -> tuple[int, ...]:
    """The spans a compiled step meets in a cache of `capacity` once `entries` are filled, shortest first:
    span_of's from the one holding them up to the capacity's."""
    met = [span_of(entries, capacity)]
    while met[-1] < capacity:
        met.append(span_of(met[-1] + 1, capacity))
    return tuple(met)


def step(model, head, cache, rows, keep: int, reach: torch.Tensor) -> torch.Tensor:
    """One forward on the static cache, its attention reading the entries at `reach` [span] (the runner's
    reach), `filled` marking the call for the model's attention (filled.filled_attention).
    rows [n, 2] or [n, 2 + n] (rows_of) -> [keep, V]"""
    sees = rows[:, 2:] if rows.shape[1] > 2 else None
    inputs = dict(input_ids=rows[None, :, 0], position_ids=rows[None, :, 1], cache=cache, use_cache=True,
                  attention_mask=visible(sees, rows.shape[0], cache.layers[0], reach), filled=True)
    if head is not None:
        return head(model.get_decoder()(**inputs).last_hidden_state[0, -keep:])
    return model(**inputs, logits_to_keep=keep).logits[0, -keep:]


def rows_of(new: list[int], positions, allowed, length: int, causal: bool = False) -> torch.Tensor:
    """A forward's inputs as one host tensor, a row per new token: its id, its position and, where a
    pattern is given (or `causal` asks for a chain's), which of the new entries it sees.  -> [n, 2] or
    [n, 2 + n] (int64). The cached entries are not in it: every row sees all `length` of them, in a
    chain as in a tree (tree.attention_mask), so of allowed [n, length + n] only its last n columns
    travel, and a prompt's n x n pattern is not sent at all (`visible` makes a chain's on the device)."""
    n = len(new)
    if allowed is not None:
        sees = allowed[:, length:]
    else:
        positions = torch.arange(length, length + n)
        sees = torch.ones(n, n, dtype=torch.bool).tril() if causal else None
    columns = [torch.tensor(new)[:, None], positions[:, None].long()]
    return torch.cat(columns if sees is None else [*columns, sees.long()], 1)


def visible(sees: torch.Tensor | None, n: int, layer, reach: torch.Tensor) -> torch.Tensor:
    """The additive mask [1, 1, n, span] over the entries at `reach` [span], made on the cache's device:
    every row sees the entries before the layer's write position (a tensor already there), then the new
    entries its row of `sees` [n, n] marks (a causal chain where None), nothing after them (stale or
    unwritten entries, or the rest of the span)."""
    # [span]: each entry's place counted from the first new one (negative: cached)
    offset = reach - layer.cumulative_length
    if sees is None:
        allowed = offset[None, :] <= torch.arange(n, device=offset.device)[:, None]
    else:
        picked = sees.gather(1, offset.clamp(0, n - 1).expand(n, -1)) != 0  # [n, capacity]: sees[r, offset]
        allowed = (offset < 0) | ((offset < n) & picked)
    return additive_mask(allowed, layer.keys.dtype)


class CachePool:
    """A model's static caches, reused across runs: a compiled step guards on the cache's shape,
    and a CUDA graph records the buffers' addresses, so fresh buffers each run would re-record.
    A runner takes one while it lives (two runners may share a target at once) and gives it back."""

    def __init__(self, model):
        self.config, self.dtype, self.device = model.config, model.dtype, model.device
        self.free: list[StaticCache] = []
        self.lock = threading.Lock()  # two sessions' runs on one loaded pair must never share a cache
        self.held = 0  # the capacity a warm-up prepared the next runs at: its caches stay past a shorter run
        self.arange: torch.Tensor | None = None  # 0, 1, ... on the device: every step's reach is a view of it

    @torch.inference_mode(False)  # a normal tensor, read by steps in and out of inference mode
    def positions(self, n: int) -> torch.Tensor:
        """[n]: 0 .. n - 1 on the pool's device, a view of one tensor made once (again, longer, for a longer
        cache), so a step's reach costs no launch."""
        if self.arange is None or self.arange.numel() < n:
            self.arange = torch.arange(grown(MIN_CAPACITY, n), device=self.device)
        return self.arange[:n]

    def take(self, capacity: int) -> StaticCache:
        with self.lock:
            for cache in self.free:
                if capacity_of(cache) == capacity:
                    self.free.remove(cache)
                    return cache
        return self.new(capacity)

    def give(self, cache: StaticCache) -> None:
        with self.lock:
            self.free.append(cache)

    def ended(self, cache: StaticCache) -> None:
        """A runner's last cache back, its run over: the free caches longer than it (an earlier, longer
        run's) go, so the pool holds what the last run stepped in rather than every capacity since the
        pair loaded. Those it stepped in stay: the next run meets them again, and a CUDA graph recorded
        on a cache replays only on that cache."""
        capacity = max(capacity_of(cache), self.held)  # a race's own short warm-up run, ending
        # before the race, must not take the caches the page's warm-up recorded the race's graphs on
        with self.lock:
            self.free = [c for c in self.free if capacity_of(c) <= capacity]
            self.free.append(cache)

    def capacities(self) -> list[int]:
        """The free caches' capacities, shortest first."""
        with self.lock:
            return sorted(capacity_of(c) for c in self.free)

    @torch.inference_mode(False)  # normal tensors even when a forward grows the cache: a rollback,
    # outside inference mode, moves the length in place, which an inference tensor refuses
    def new(self, capacity: int) -> StaticCache:
        text = self.config.get_text_config()
        cache = StaticCache(config=self.config, max_cache_len=capacity + SPARE)
        if any(layer.is_sliding for layer in cache.layers):
            raise ValueError("the static runner needs full-attention layers (a sliding window cannot "
                             "hold a tree or a rollback); use runner eager")
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        # initialised now, not lazily in a forward: a CUDA graph captured before would overwrite it
        cache.early_initialization(batch_size=1, num_heads=text.num_key_value_heads, head_dim=head_dim,
                                   dtype=self.dtype, device=self.device)
        return cache


class ModelState:
    """What a model's runners share: its cache pool and its compiled steps, kept on the model (they
    live and die with it; no global registry). A copy of the model (deepcopy, pickle) starts with
    none: caches and compiled code belong to the weights they ran with."""

    def __init__(self):
        self.pool: CachePool | None = None
        self.steps = None  # compiled.Steps, made by the first compiled runner

    def __deepcopy__(self, memo) -> ModelState:
        return ModelState()

    def __reduce__(self):
        return (ModelState, ())


def state_of(model) -> ModelState:
    state = model.__dict__.get("_playground_runners")
    if state is None:
        state = model.__dict__["_playground_runners"] = ModelState()
    return state


def pool_of(model) -> CachePool:
    state = state_of(model)
    if state.pool is None:
        state.pool = CachePool(model)
    return state.pool
