"""What a model computes in: the dtype for its device and card, and bitsandbytes' quantizations
(nf4, LLM.int8) with their configuration and their log quieted. Asked by models/loading before any
weight loads, so a bad setting fails first.

torch and transformers are imported inside functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

# LLM.int8's outlier threshold: input columns holding a value past it are multiplied in float16, the
# rest in int8. 6.0 is the paper's value (Dettmers et al. 2022) and bitsandbytes' default: with 0 the
# outlier check and its 1-2 host syncs a linear layer go, but so does the accuracy of models whose
# activations carry large outliers (every model past ~6.7B, and Qwen2.5 well before). Chosen: accuracy.
INT8_THRESHOLD = 6.0
# Model families (config.json's model_type) whose activations stay within float16's range (65,504): a
# card without native bfloat16 runs them in float16. Llama and Mistral checkpoints are run in float16 on
# T4 and V100 cards as a matter of course (vLLM's default dtype there).
FLOAT16_SAFE = frozenset({"llama", "mistral"})
# Families known to overflow float16 (inf, then NaN logits: Qwen2 and Qwen2.5 carry activations of
# several hundred thousand in a few hidden dimensions; Gemma scales its embeddings up by sqrt(hidden)),
# named as such in the message; a family in neither set is simply not known to be safe: float32 too.
FLOAT16_OVERFLOWS = frozenset({"qwen2", "qwen2_moe", "gemma", "gemma2", "gemma3", "gemma3_text"})

Progress = Callable[[str, "float | None"], None]  # (message, fraction done or None)


def resolve_dtype(dtype: str, device: str, family: str | None = None, quantization: str = "none",
                  report: Progress | None = None, name: str = "") -> str:
    """auto: bfloat16 wherever it runs natively; on a CUDA card without it, float16 for a family known
    to stay within its range (FLOAT16_SAFE), else float32, said through `report`. int8 on CUDA: float16
    for such a family, since LLM.int8 computes in float16 and casts any other input on every matmul.

    bf16 keeps float32's range (no overflow surprises) at half the bytes; decoding one token at a
    time is bound by reading weights, so half the bytes is most of the speed. PyTorch runs bf16 on
    every CPU (natively with AVX512-BF16/AMX, emulated otherwise), while CPU float16 is slow. On CUDA
    bf16 is native from compute capability 8.0 (Ampere); `torch.cuda.is_bf16_supported()` answers True
    on older cards too, which emulate it slowly, so the capability is asked instead.
    `family`: config.json's model_type (None: not known yet)."""
    if dtype != "auto":
        return dtype
    if device != "cuda":
        return "bfloat16"
    if quantization == "int8" and family in FLOAT16_SAFE:
        return "float16"
    if native_bf16():
        return "bfloat16"
    if family in FLOAT16_SAFE:
        return "float16"
    why = "overflows float16" if family in FLOAT16_OVERFLOWS else "is not known to stay within float16's range"
    (report or (lambda message, fraction: None))(f"{name}: this GPU has no native bfloat16 (compute capability {capability()}) and "
                     f"{family or 'this model'} {why}: loading in float32, twice bfloat16's memory; set dtype "
                     "float16 to try half precision anyway", None)
    return "float32"


def native_bf16() -> bool:
    """The CUDA card computes in bfloat16 natively: compute capability 8.0 or later (ROCm: every card torch runs on)."""
    import torch

    return torch.version.hip is not None or torch.cuda.get_device_capability()[0] >= 8


def capability() -> str:
    import torch

    return ".".join(map(str, torch.cuda.get_device_capability()))


def model_family(path: Path) -> str | None:
    """A checkpoint's model_type, from its config.json (None when it has none)."""
    import json

    try:
        return json.loads((Path(path) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def require_bitsandbytes(quantization: str, name: str) -> None:
    try:
        import bitsandbytes  # noqa: F401  (transformers needs it at load; checked here for a clear message)
    except Exception as e:
        raise RuntimeError(
            f"quantization {quantization!r} for model {name!r} needs bitsandbytes, which failed to import "
            f"({type(e).__name__}: {e}); install it (pip install -r requirements.txt) or use "
            "quantization none"
        ) from e


def bitsandbytes_config(quantization: str, dtype: str, name: str):
    """BitsAndBytesConfig for nf4 (4-bit, computing in `dtype`) or int8 (LLM.int8, INT8_THRESHOLD)."""
    require_bitsandbytes(quantization, name)
    import torch
    from transformers import BitsAndBytesConfig

    if quantization == "nf4":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=getattr(torch, dtype))
    return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=INT8_THRESHOLD)


class HushOwnForward(logging.Filter):
    """Holds back bitsandbytes' warnings logged by one thread (the one running a forward); errors pass."""

    def __init__(self, thread: int):
        super().__init__()
        self.thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or record.thread != self.thread


def quiet_bitsandbytes(model) -> None:
    """While the model's decoder runs (every forward: a runner's, a cut head's), bitsandbytes' loggers
    drop that thread's warnings; after it, restored. LLM.int8 logs "inputs will be cast to float16" on
    every matmul whose input is not float16 (196 lines a forward of a 28-layer model), through a
    logger that `warnings.filterwarnings` does not reach."""
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n == "bitsandbytes" or n.startswith("bitsandbytes.")]
    held: dict[int, HushOwnForward] = {}  # thread -> the filter its forward added

    def hush(*_):
        held[threading.get_ident()] = hushed = HushOwnForward(threading.get_ident())
        for logger in loggers:
            logger.addFilter(hushed)

    def restore(*_):
        hushed = held.pop(threading.get_ident(), None)
        for logger in loggers:
            logger.removeFilter(hushed)

    decoder = model.get_decoder()
    decoder.register_forward_pre_hook(hush)
    decoder.register_forward_hook(restore, always_call=True)  # restored even when the forward raises
