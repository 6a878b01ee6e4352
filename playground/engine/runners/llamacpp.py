"""The llamacpp runner: llama.cpp's own kernels run every forward, on the GGUF file the model came from.

What a CPU user would run instead of PyTorch is llama.cpp on the same GGUF file; this runner puts
our drafting and verification on its kernels, the baseline too, so the race stays fair and the
"faster than what?" question is asked of the fastest plain decoding there is. It needs the
optional extra (llama-cpp-python, built from its source distribution: see docs/runners.md) and a model
whose loader recorded `gguf_file`, the file it was loaded from (models/loading does for every GGUF
source); it runs that file's own quantization, whatever the run's quantization says.

The cache is the KV memory of one llama.cpp context, its sequence 0 the committed tokens: a chain
is fed as sequence 0 and rollback is `llama_memory_seq_rm`. A token tree (the target verifying one,
or the draft growing one level at a time) uses llama.cpp's sequence ids, which is how its attention
is masked: a token sees the cells that share a sequence with it at positions not after its own.
Every leaf gets a sequence holding exactly its path (its nearest cached ancestor's sequence copied
up to that ancestor's position: a copy only tags cells), and a new node belongs to the sequences of
the leaves below it, so it sees its ancestors and nothing else. Keeping the accepted path tags its
cells as sequence 0 (they sit at consecutive positions already) and drops the branches' sequences.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

import numpy as np
import torch

from playground.engine.runners import doubled

# A context is reopened larger (the committed tokens fed again, a prefill) when a run needs more
# entries or a tree more leaves than it was made for; each sequence costs a logits row of reserve.
CONTEXT = 8192  # entries of a context; reopened twice as large (committed tokens fed again) when full
HEADROOM = 1024  # entries kept free when a chain is fed, so a round's tree never meets a full context
SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: sequence 0 and up to 255 branches
BATCH = 512  # tokens one llama_decode takes; a longer prompt goes in several (at least SEQUENCES)


def llama():
    """llama_cpp, imported when a runner is made (never at import of the engine), silenced: the
    engine never prints, and llama.cpp logs every load to stderr."""
    try:
        import llama_cpp
    except ImportError as e:
        raise ValueError("runner llamacpp needs llama-cpp-python, an optional extra: see docs/runners.md, "
                         "'Run on llama.cpp's kernels'") from e
    if not getattr(llama_cpp, "_playground_quiet", None):
        llama_cpp.llama_backend_init()
        llama_cpp._playground_quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(llama_cpp._playground_quiet, ctypes.c_void_p(0))
    return llama_cpp


class Weights:
    """One GGUF file loaded by llama.cpp (memory-mapped), shared by every runner of the model."""

    def __init__(self, path: str):
        L = llama()
        params = L.llama_model_default_params()
        params.n_gpu_layers = 0
        self.handle = L.llama_model_load_from_file(os.fsencode(path), params)
        if not self.handle:
            raise ValueError(f"llama.cpp could not load {path}")
        self.bytes = os.path.getsize(path)  # mapped, and every page read by a forward
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.handle))
        # an all-float32 file (the tiny pair's) keeps its cache in float32 and attends without flash
        # attention (which rounds through float16 on a CPU), so llama.cpp computes what PyTorch
        # does; a quantized file gets llama.cpp's own defaults, a float16 cache
        self.exact = float32_file(path)
        self.finalizer = weakref.finalize(self, L.llama_model_free, self.handle)


def float32_file(path) -> bool:
    """Is every tensor of the GGUF file float32 (general.file_type ALL_F32)? Read from its header only."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    return field is not None and int(field.parts[field.data[0]][0]) == int(gguf.LlamaFileType.ALL_F32)


WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> Weights, freed with the model
LOCK = threading.Lock()


def held_bytes(model) -> int:
    """What llama.cpp holds for the model outside torch: its GGUF file, once loaded."""
    weights = WEIGHTS.get(model)
    return weights.bytes if weights is not None else 0


def weights_of(model) -> Weights:
    locate = getattr(model, "gguf_file", None)  # models/gguf_file.record: a callable -> the file's path
    if locate is None:
        raise ValueError("runner llamacpp needs a model loaded from a GGUF file (a model pack, a local "
                         f".gguf or a hub gguf_file); {type(model).__name__} was not")
    if model.device.type != "cpu":
        raise ValueError(f"runner llamacpp runs on the CPU; the model is on {model.device}")
    with LOCK:
        if model not in WEIGHTS:
            WEIGHTS[model] = Weights(str(locate()))
        return WEIGHTS[model]


class LlamaCppRunner:
    """Per cache entry (the CachedModel's token order) it keeps the position, the parent (the entry
    it extends, -1 for none) and the sequences its cell carries; the first `committed` entries are
    sequence 0, a plain prefix."""

    name = "llamacpp"

    def __init__(self, model, head=None):
        self.L, self.weights, self.device = llama(), weights_of(model), torch.device("cpu")
        self.rows = getattr(head, "rows", None)  # a trimmed draft vocabulary: the same distribution, masked
        if self.weights.vocab < model.config.get_text_config().vocab_size:
            raise ValueError(f"{model.gguf_file()} has {self.weights.vocab} tokens, fewer than the model's "
                             f"vocabulary of {model.config.get_text_config().vocab_size}")
        self.context = None
        self.open(CONTEXT)

    @property
    def cache(self):
        return self.memory

    @property
    def length(self) -> int:
        return len(self.tokens)

    def open(self, size: int) -> None:
        """A fresh, empty context of `size` entries (the old one freed) and a batch for one decode."""
        L, size = self.L, max(size, BATCH)  # llama.cpp clamps a batch to its context, and needs a row a sequence
        if self.context is not None:
            self.closer()
        params = L.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = size, BATCH, BATCH
        params.n_seq_max, params.kv_unified, params.no_perf = SEQUENCES, True, True
        params.n_threads = params.n_threads_batch = torch.get_num_threads()
        if self.weights.exact:
            params.type_k = params.type_v = L.GGML_TYPE_F32
            params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.context = L.llama_init_from_model(self.weights.handle, params)
        if not self.context:
            raise ValueError(f"llama.cpp could not make a context of {size} entries")
        self.batch = L.llama_batch_init(BATCH, 0, SEQUENCES)
        self.closer = weakref.finalize(self, close, L, self.context, self.batch)
        self.memory = L.llama_get_memory(self.context)
        self.size = size
        self.forget()

    def forget(self) -> None:
        self.tokens, self.positions, self.parents, self.sequences = [], [], [], []
        self.committed, self.branches = 0, 0  # branches: sequences 1..branches are in use

    def reset(self) -> None:
        self.L.llama_memory_clear(self.memory, True)
        self.forget()

    def crop(self, n: int) -> None:
        """Keep the first n entries: those past the committed prefix must be a path extending it
        (the accepted start of a tree), which becomes sequence 0; every branch is dropped."""
        if n > self.committed:
            self.commit(list(range(self.committed, n)))
        self.drop_branches()
        if self.length > n:
            self.L.llama_memory_seq_rm(self.memory, 0, n, -1)
            for kept in (self.tokens, self.positions, self.parents, self.sequences):
                del kept[n:]
        self.committed = self.length

    def move(self, prefix: int, picks: list[int]) -> None:
        """The accepted path of a tree: its entries sit at positions prefix, prefix + 1, ... (a
        node's position is the context length plus its depth), so keeping them is tagging their
        cells as sequence 0; no key or value moves. A tree that starts as a chain had that chain fed
        as sequence 0 already (forward's trunk): those picks are in place, the rest are committed."""
        if prefix > self.committed:
            self.crop(prefix)
        trunk = next((k for k, i in enumerate(picks) if i != prefix + k or i >= self.committed), len(picks))
        self.commit(picks[trunk:])
        self.drop_branches()
        for kept in (self.tokens, self.positions, self.parents, self.sequences):
            kept[prefix : prefix + len(picks)] = [kept[i] for i in picks]
        self.parents[prefix : prefix + len(picks)] = range(prefix - 1, prefix + len(picks) - 1)
        self.sequences[prefix : prefix + len(picks)] = [[0]] * len(picks)

    def commit(self, picks: list[int]) -> None:
        """Tag entries `picks`, a path from the committed prefix, as sequence 0."""
        start = self.committed
        if not picks:
            return
        path = [self.parents[picks[0]] == start - 1] + [self.parents[b] == a for a, b in zip(picks, picks[1:])]
        if not all(path) or [self.positions[i] for i in picks] != list(range(start, start + len(picks))):
            raise ValueError("runner llamacpp keeps a root-first path of the last tree")
        self.L.llama_memory_seq_cp(self.memory, self.sequences[picks[-1]][0], 0, start, start + len(picks))
        self.committed = start + len(picks)

    def drop_branches(self) -> None:
        for s in range(1, self.branches + 1):
            self.L.llama_memory_seq_rm(self.memory, s, -1, -1)
        self.branches = 0

    def forward(self, new: list[int], positions, allowed, keep: int) -> torch.Tensor:
        start = self.length
        positions = list(range(start, start + len(new))) if positions is None else [int(p) for p in positions]
        parents = ([start + i - 1 for i in range(len(new))] if allowed is None
                   else tree_parents(allowed, self.parents, self.committed))
        trunk = chain_length(parents, positions, start) if self.committed == start else 0
        if self.committed == start:
            self.drop_branches()  # any left only tag committed cells
        if trunk:
            self.reserve(start + len(new) + HEADROOM)
        elif start + len(new) > self.size:
            raise ValueError(f"runner llamacpp: a tree past the context's {self.size} entries")
        rows = self.feed_chain(new[:trunk], positions[:trunk], keep - (len(new) - trunk)) if trunk else []
        if trunk < len(new):
            rows.append(self.feed_tree(new[trunk:], positions[trunk:], parents[trunk:]))
        logits = torch.from_numpy(np.concatenate(rows)[-keep:])
        if self.rows is not None:
            logits[:, self.rows :] = float("-inf")
        return logits

    def feed_chain(self, tokens: list[int], positions: list[int], keep: int) -> list[np.ndarray]:
        """Tokens extending sequence 0, in decodes of at most BATCH; logits of the last `keep`."""
        out = []
        for at in range(0, len(tokens), BATCH):
            chunk = tokens[at : at + BATCH]
            wanted = [at + i >= len(tokens) - keep for i in range(len(chunk))]
            first = self.length
            out.append(self.decode(chunk, positions[at : at + BATCH], [[0]] * len(chunk), wanted))
            self.parents.extend(range(first - 1, first - 1 + len(chunk)))
        self.committed = self.length
        return [o for o in out if len(o)]

    def feed_tree(self, tokens: list[int], positions: list[int], parents: list[int]) -> np.ndarray:
        """Tokens that branch, in one decode: every new leaf gets a sequence holding its path, and
        each token the sequences of the leaves below it."""
        start = self.length
        if len(tokens) > BATCH:
            raise ValueError(f"runner llamacpp verifies trees of at most {BATCH} nodes, got {len(tokens)}")
        below = [[] for _ in tokens]  # per new token, the sequences of the new leaves under it
        for leaf in [i for i in range(len(tokens)) if start + i not in parents]:
            seq = self.branch(self.cached_ancestor(start + leaf, parents, start))
            node = start + leaf
            while node >= start:
                below[node - start].append(seq)
                node = parents[node - start]
        self.parents.extend(parents)
        return self.decode(tokens, positions, [sorted(s) for s in below], [True] * len(tokens))

    def cached_ancestor(self, node: int, parents: list[int], start: int) -> int:
        while node >= start:
            node = parents[node - start]
        return node

    def branch(self, ancestor: int) -> int:
        """A new sequence holding the path to a cached entry (-1: the empty cache)."""
        if self.branches + 1 >= SEQUENCES:
            raise ValueError(f"runner llamacpp verifies trees of at most {SEQUENCES - 1} leaves")
        self.branches += 1
        if ancestor >= 0:
            source = 0 if ancestor < self.committed else self.sequences[ancestor][0]
            self.L.llama_memory_seq_cp(self.memory, source, self.branches, -1, self.positions[ancestor] + 1)
            for i in self.path(ancestor):
                self.sequences[i] = self.sequences[i] + [self.branches]
        return self.branches

    def path(self, entry: int) -> list[int]:
        """The uncommitted entries from `entry` back to the committed prefix."""
        out = []
        while entry >= self.committed:
            out.append(entry)
            entry = self.parents[entry]
        return out

    def decode(self, tokens, positions, ids, wanted) -> np.ndarray:
        b = self.batch
        for i, (t, p, s, w) in enumerate(zip(tokens, positions, ids, wanted)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, len(s), w
            for j, sid in enumerate(s):
                b.seq_id[i][j] = sid
        b.n_tokens = len(tokens)
        status = self.L.llama_decode(self.context, b)
        if status != 0:
            raise RuntimeError(f"llama_decode failed ({status}) on {len(tokens)} tokens after {self.length}")
        self.tokens.extend(tokens)
        self.positions.extend(positions)
        self.sequences.extend(list(s) for s in ids)
        n = sum(wanted)
        if not n:
            return np.empty((0, self.weights.vocab), dtype=np.float32)
        return np.ctypeslib.as_array(self.L.llama_get_logits(self.context), shape=(n, self.weights.vocab)).copy()

    def reserve(self, n: int) -> None:
        """Room for n entries: a context twice as large (or more), the committed tokens fed again."""
        if n <= self.size:
            return
        tokens = self.tokens
        self.open(doubled(self.size, n))
        self.feed_chain(tokens, list(range(len(tokens))), 0)


def close(L, context, batch) -> None:
    L.llama_batch_free(batch)
    L.llama_free(context)


def tree_parents(allowed: torch.Tensor, cached_parents: list[int], committed: int) -> list[int]:
    """allowed [n, length + n] -> each new token's parent: the entry it sees last. Refused unless
    each token sees exactly its parent's path and itself (a chain or a token tree), parents first;
    a path reaching the committed prefix at entry e sees all of 0..e."""
    length = len(cached_parents)
    parents = []
    for i in range(allowed.shape[0]):
        row = allowed[i, : length + i + 1]
        seen = row[:-1].nonzero().flatten()
        parent = int(seen[-1]) if len(seen) else -1
        expected = torch.zeros_like(row)
        expected[-1] = True
        node = parent
        while node >= committed:
            expected[node] = True
            node = cached_parents[node] if node < length else parents[node - length]
        expected[: node + 1] = True
        if not torch.equal(row, expected) or bool(allowed[i, length + i + 1 :].any()):
            raise ValueError("runner llamacpp takes chains and token trees: each token sees its ancestors")
        parents.append(parent)
    return parents


def chain_length(parents: list[int], positions: list[int], start: int) -> int:
    """How many leading new tokens extend the cache as a plain chain, each the parent of the next
    new token that follows it (the uncached context before a tree, or a whole chain)."""
    t = 0
    while t < len(parents) and parents[t] == start + t - 1 and positions[t] == start + t and \
            all(p != start + t - 1 or j == t for j, p in enumerate(parents)):
        t += 1
    return t
