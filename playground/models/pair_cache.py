"""The warm pair cache: the last pair (or last `keep` pairs) loaded, kept across a session's jobs.

Its own job, apart from loading one model or a pair (loading.py): which pairs stay resident between
runs, which run's knobs reuse one, when a load is cancelled for another pair (Cancelled), and when a
pair is released so its memory really comes back (evicted, its holders told to let go, or let go
when models.yaml or user-pairs.yaml gives its name other models). The compiled runner's refusal of a
bitsandbytes model is checked here, before anything loads.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable

from playground.config import BITSANDBYTES
from playground.models.handle import free_memory
from playground.models.loading import LoadedPair, Progress, draft_model_spec, load_pair, pair_with
from playground.models.registry import Registry


class Cancelled(BaseException):
    """Raised from a progress callback to abandon a load (a BaseException, so no `except Exception`
    on the way mistakes it for a failed source and tries the next one)."""


class PairCache:
    """Loads pairs on demand; keeps the last `keep` pairs warm; switching frees the previous one.

    Memory is freed only when nobody else holds the pair: callers should not keep a LoadedPair
    (or its models) beyond the run that uses it. One that must (a paused step-through run)
    registers with `hold`, and is told to let go when the pair is evicted. So at most `keep` pairs
    are resident, whoever uses them. Thread-safe, since UI handlers run in threads.
    """

    def __init__(self, registry: Registry, keep: int = 1):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep: expected an integer of at least 1, got {keep!r}")
        self.registry = registry
        self.keep = keep
        self.pairs: OrderedDict[tuple, LoadedPair] = OrderedDict()  # least recently used first
        self.lock = threading.RLock()
        self.holders: dict[int, list] = {}  # id(pair) -> weak references to release callbacks

    def get(self, name: str | None = None, *, draft: str | None = None, target_quantization: str | None = None,
            draft_quantization: str | None = None, dtype: str | None = None, device: str | None = None,
            progress: Progress | None = None, **use) -> LoadedPair:
        """The pair, loaded or kept. `use`, how the run will use it (not part of the key): with_draft
        (default True), its draft loaded now for a drafter that runs it, else left for its first use;
        runner, the run's, so that one which cannot run a model as models.yaml quantizes it is refused
        before anything loads."""
        with_draft, runner = run_use(**use)
        spec = self.registry.pair(name)
        draft_spec = draft_model_spec(self.registry, spec, draft)
        knobs = {
            "draft": draft_spec.name,
            "target_quantization": target_quantization or self.registry.model(spec.target).quantization,
            "draft_quantization": draft_quantization or draft_spec.quantization,
            "dtype": dtype,
            "device": device,
        }
        refuse_pairing(runner, knobs, with_draft)
        key = (spec.name, *knobs.values())
        with self.lock:
            if key in self.pairs:
                self.pairs.move_to_end(key)
                pair = self.pairs[key]
                if with_draft:
                    pair.load_draft(progress)
                return pair
            target = self.kept_target(key)
            self.evict(self.keep - 1)  # free memory before loading the next pair, not after
            try:
                if target is None:
                    pair = load_pair(self.registry, spec, progress=progress, **knobs)
                else:  # only the draft changed: the kept target serves the new pair
                    pair = pair_with(self.registry, spec, target, draft=knobs["draft"], dtype=dtype, device=device,
                                     draft_quantization=knobs["draft_quantization"])
                free_memory()  # what loading and quantizing the target dropped (0.3 GB of heap for the default pair)
                if with_draft:
                    pair.load_draft(progress)
            except BaseException:  # failed or cancelled half-way: give back what was loaded
                free_memory()
                raise
            self.pairs[key] = pair
            return pair

    def kept_target(self, key: tuple):
        """The target of a kept pair that differs from `key` only in its draft: the next pair shares it,
        so picking another draft reloads the draft alone, not the target with its runners' sessions
        and its PyTorch form (made for a tree or the self draft: most of a minute for the 1.5B on 2 cores)."""
        def same_target(k: tuple) -> bool:  # (name, draft, target quantization, draft quantization, dtype, device)
            return (k[0], k[2], *k[4:]) == (key[0], key[2], *key[4:])

        return next((pair.target for k, pair in reversed(self.pairs.items()) if same_target(k)), None)

    def use(self, registry: Registry) -> None:
        """Load from `registry` from now on (the same one read again, with pairs kept or picked since): a
        kept pair whose name now means other models, or whose models now load otherwise, is let go."""
        with self.lock:
            old, self.registry = self.registry, registry
            stale = [key for key in self.pairs if changed(old, registry, key)]
            for key in stale:
                pair = self.pairs.pop(key)
                for ref in self.holders.pop(id(pair), []):
                    if (release := ref()) is not None:
                        release()
                del pair
            if stale:
                free_memory()

    def hold(self, pair: LoadedPair, release: Callable[[], None]) -> None:
        """Call `release` when `pair` is evicted, so a user that keeps it between jobs (a paused
        run) drops its references and the memory really comes back. Held weakly: an abandoned
        holder does not stay alive for this."""
        ref = weakref.WeakMethod(release) if hasattr(release, "__self__") else weakref.ref(release)
        with self.lock:
            if any(p is pair for p in self.pairs.values()):
                self.holders.setdefault(id(pair), []).append(ref)
            else:  # already evicted (or never cached): let go at once
                release()

    def resident(self) -> list[str]:
        """Names of the pairs the cache holds."""
        with self.lock:
            return [key[0] for key in self.pairs]

    def clear(self) -> None:
        with self.lock:
            self.evict(0)

    def evict(self, leave: int) -> None:
        """Drop least recently used pairs until `leave` remain, and give their memory back."""
        if len(self.pairs) <= leave:
            return
        while len(self.pairs) > leave:
            _, pair = self.pairs.popitem(last=False)
            for ref in self.holders.pop(id(pair), []):
                if (release := ref()) is not None:
                    release()
            del pair
        free_memory()


def changed(old: Registry, new: Registry, key: tuple) -> bool:
    """Does the loaded pair under `key` (name, draft, ...) mean something else in `new`?"""
    name, draft = key[0], key[1]
    if old.pairs.get(name) != new.pairs.get(name):
        return True
    spec = new.pairs.get(name)
    return any(old.models.get(m) != new.models.get(m) for m in (spec.target, draft))


def run_use(with_draft: bool = True, runner: str | None = None) -> tuple[bool, str | None]:
    """PairCache.get's `use`, its names checked."""
    return with_draft, runner


def refuse_pairing(runner: str | None, knobs: dict, with_draft: bool) -> None:
    """The compiled runner cannot run a bitsandbytes model: refused by name, the knob that set it included."""
    if runner != "compiled":
        return
    from playground.config import compiled_refuses

    for field in ("target_quantization", "draft_quantization")[: 1 + with_draft]:
        if knobs[field] in BITSANDBYTES:
            raise compiled_refuses(field, knobs[field])
