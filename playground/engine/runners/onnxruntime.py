"""The onnxruntime runner: ONNX Runtime's CPU kernels run every forward, on a model built once from
the GGUF (or checkpoint) the model was loaded from.

On CPUs without AVX-512 its int4 weight-only MatMulNBits kernel decodes faster than llama.cpp's own
loop and verifies several tokens at a lower cost than PyTorch's packed kernels, so it is where
speculation has the most to gain on a small CPU. onnxruntime-genai's model builder exports the
model (GroupQueryAttention, rotary embeddings inside it, logits for every fed position);
`onnx_build.py` builds, trims and caches it.

The cache is one preallocated key and value buffer per layer, bound with IOBinding as both the past
input and the present output (GroupQueryAttention writes the new entries in place when the two are
the same buffer, as onnxruntime-genai's own decoder state binds them): a step copies no cache, and
rollback moves an integer, the length the attention mask says is valid. GroupQueryAttention takes
no tree mask, so this runner verifies chains only and refuses a tree by name.
"""

from __future__ import annotations

import numpy as np
import torch

from playground.engine.runners import doubled
from playground.engine.runners.onnx_build import Built, built_model, ort
from playground.engine.runners.onnx_graph import LAST_ROWS

MIN_CAPACITY = 256  # entries a fresh cache holds; doubled (the held entries copied) when a step needs more
# A forward over more rows than this (a prompt) gives its activations' memory back once it is done:
# ONNX Runtime's arena otherwise keeps its peak (a 1,235-token prompt left the default target's session
# 270 MB larger for good; shrunk, 112 MB: the cache entries it holds). Decoding steps keep the arena,
# which their next step reuses as it is.
SHRINK_ROWS = 64


class OnnxRuntimeRunner:
    name = "onnxruntime"

    def __init__(self, model, head=None):
        if model.device.type != "cpu":
            raise ValueError(f"runner onnxruntime runs on the CPU here; the model is on {model.device}")
        rows = getattr(head, "rows", None)  # a trimmed draft vocabulary: built into the model's head
        self.built: Built = built_model(model, rows)
        self.session = self.built.session(torch.get_num_threads())
        self.shrink = ort().RunOptions()
        self.shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self.vocab = model.config.get_text_config().vocab_size
        self.device = torch.device("cpu")
        self.capacity, self.buffers = 0, []
        self.reset()

    @property
    def cache(self):
        return self.buffers

    def reset(self) -> None:
        self.length = 0
        if self.capacity != MIN_CAPACITY:
            self.allocate(MIN_CAPACITY)

    def crop(self, n: int) -> None:
        self.length = min(self.length, n)  # entries past it are overwritten by the next step

    def move(self, prefix: int, picks: list[int]) -> None:
        raise ValueError(TREES_REFUSED)

    def forward(self, new: list[int], positions, allowed, keep: int) -> torch.Tensor:
        if allowed is not None:
            raise ValueError(TREES_REFUSED)
        total = self.length + len(new)
        if total > self.capacity:
            self.allocate(doubled(self.capacity, total))  # reset() left it at MIN_CAPACITY at least
        binding = self.session.io_binding()
        binding.bind_output("logits")
        binding.bind_cpu_input("input_ids", np.asarray([new], dtype=np.int64))
        binding.bind_cpu_input("attention_mask", np.ones((1, total), dtype=np.int64))
        binding.bind_ortvalue_input(LAST_ROWS, ort().OrtValue.ortvalue_from_numpy(np.asarray([keep], dtype=np.int64)))
        for name, buffer in zip(self.built.past_names, self.buffers):
            binding.bind_ortvalue_input(name, buffer)
        for name, buffer in zip(self.built.present_names, self.buffers):
            binding.bind_ortvalue_output(name, buffer)
        self.session.run_with_iobinding(binding, self.shrink if len(new) > SHRINK_ROWS else None)
        self.length = total
        logits = torch.from_numpy(binding.get_outputs()[0].numpy()[0, -keep:])
        if logits.shape[-1] < self.vocab:  # a trimmed head: the ids past it are never drafted
            logits = torch.nn.functional.pad(logits, (0, self.vocab - logits.shape[-1]), value=float("-inf"))
        return logits

    def allocate(self, capacity: int) -> None:
        """Buffers of `capacity` entries, the held ones copied over."""
        O = ort()
        shape = (1, self.built.kv_heads, capacity, self.built.head_size)
        fresh = []
        for old in self.buffers or [None] * len(self.built.past_names):
            array = np.zeros(shape, dtype=self.built.kv_dtype)
            if old is not None and self.length:
                array[:, :, : self.length] = old.numpy()[:, :, : self.length]
            fresh.append(O.OrtValue.ortvalue_from_numpy(array))
        self.buffers, self.capacity = fresh, capacity


TREES_REFUSED = ("runner onnxruntime verifies chains only: its GroupQueryAttention takes no tree mask; "
                 "use speculation chain, or runner eager, static, compiled or llamacpp for a tree")
