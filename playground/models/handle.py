"""A model as its files, its PyTorch form made only when something computes with PyTorch.

On a CPU the default path never computes with PyTorch: ONNX Runtime runs both models from builds
made straight from their GGUF files (engine/runners/onnx_build.py). Loading the transformers model
there anyway held a second copy of every weight beside ONNX Runtime's sessions (1.9 GB for the
default pair) and cost a dequantization at every start. A `ModelHandle` answers what a run asks
before its first forward from small files (config, generation config, the GGUF and a metadata
folder: config.json and the tokenizer, written once per GGUF), and makes the PyTorch model on the
first use of anything only PyTorch has: a tree, self-drafting, the eager, static and compiled
runners, Theory's runner section. `release` lets it go again (auto keeps onnxruntime after timing
it against eager). auto times eager on a random-weight `twin` instead while the model is unmade: the
same layers and shapes, made in seconds (models/twin.py).

Any attribute the handle has not got is looked up on the PyTorch model, which is made for it; so a
feature written against a transformers model works on a handle unchanged, and pays the load the
first time. The engine asks `runners.module_of(model)` where it hands a model to torch itself.
"""

from __future__ import annotations

import gc
import threading
from typing import Callable


class ModelHandle:
    """`make` -> the PyTorch model (loaded and quantized as the run asked), called at most once a
    `release`. `config` and `generation_config` are transformers objects read from the metadata
    folder; `quantization` the CPU quantization the PyTorch form gets (int4-cpu for the default)."""

    # the files a runner builds or loads from, recorded by models/loading (callables -> Path), and the
    # GGUF's SHA-256 (a callable -> str); None here, so that asking for one a handle has not got
    # answers None and does not load PyTorch
    gguf_file = metadata_dir = checkpoint_dir = gguf_sha256 = None

    def __init__(self, name: str, config, generation_config, device: str, dtype: str, quantization: str,
                 make: Callable[[], object]):
        import torch

        self.name, self.config, self.generation_config = name, config, generation_config
        self.device, self.dtype, self.quantization = torch.device(device), getattr(torch, dtype), quantization
        self.make, self.made, self.lock = make, None, threading.Lock()

    def module(self):
        """The PyTorch model, made now if it is not yet."""
        with self.lock:
            if self.made is None:
                self.made = self.make()
            return self.made

    def twin(self):
        """A new PyTorch model of the same config, layer classes, shapes and packing as the one `make`
        makes, every weight random, made without reading the GGUF (models/twin.py): what a step's
        timing runs on while this handle is unmade. The caller holds it; the handle does not."""
        from playground.models.twin import random_twin

        return random_twin(self.config, self.dtype, self.quantization)

    @property
    def loaded(self) -> bool:
        return self.made is not None

    def release(self) -> None:
        """Drop the PyTorch model (the next use makes it again) and give its memory back."""
        with self.lock:
            self.made = None
        free_memory()

    def parameters(self):
        """The torch weights held now: none until the PyTorch model is made (memory counts what is held)."""
        return self.made.parameters() if self.made is not None else iter(())

    def buffers(self):
        return self.made.buffers() if self.made is not None else iter(())

    def __call__(self, *args, **kwargs):
        return self.module()(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("made", "make", "lock"):  # copy/pickle probes, half-built handles
            raise AttributeError(name)
        return getattr(self.module(), name)

    def __repr__(self) -> str:
        return f"ModelHandle({self.name!r}, {'loaded' if self.loaded else 'files only'})"


def free_memory() -> None:
    """Collect dropped models and hand freed memory back to the OS (and to CUDA)."""
    gc.collect()
    trim_heap()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def trim_heap() -> None:
    """Hand the C heap's freed pages back to the OS. glibc keeps them for reuse unless asked: a run's
    cache buffers and ONNX Runtime's activations for a 1,086-token prompt left the process 160 MB
    larger after the run had freed them (reused by the next run, but held from the rest of the
    machine); trimmed, 4 MB smaller than before the run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to ask
        pass
