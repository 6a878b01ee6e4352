"""A model's shape: what its measured costs carry over by. A forward's cost is a fact of the tensors it
multiplies, not of the model's name, so two files of one architecture, parameter count and weight type
(an Ollama blob and an LM Studio copy of one GGUF, two fine-tunes of one base) cost the same on one
machine, and a v(k) measured on one serves the other (measure/bench/curve_store.py).

Read the way the scan reads it (scan/read.py) so a scanned model and a loaded one give the same shape:
a GGUF's header (architecture, elements of every tensor, file type), a checkpoint's config.json and
safetensors headers. Headers only: nothing here reads weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    architecture: str  # general.architecture, or config.json's model_type
    parameters: int  # elements of every tensor in the file
    weights: str  # the GGUF's file type (Q4_K_M, F16, ...), or the checkpoint's dtype

    def said(self) -> str:
        """As a sentence says it: "qwen2, 1.54 B parameters, Q4_K_M"."""
        count = (f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e8 else f"{self.parameters:,}")
        return f"{self.architecture}, {count} parameters, {self.weights}"


def of_scanned(model) -> Shape | None:
    """A scan's Model (scan/listing.py); None where its header gave no architecture or parameter count."""
    if not model.architecture or not model.parameters:
        return None
    return Shape(model.architecture, int(model.parameters), model.quantization)


def of_loaded(model) -> Shape | None:
    """The shape of a loaded model (a transformers model or a ModelHandle) from the file it came from:
    its GGUF's header where it has one (loading.record_gguf), else its checkpoint folder's, else its
    config and tensors in memory (a tiny model made here). None where none of these says."""
    locate = getattr(model, "gguf_file", None)
    if callable(locate):
        return of_gguf(Path(locate()))
    folder = getattr(model, "checkpoint_dir", None)
    if callable(folder) and (Path(folder()) / "config.json").is_file():
        return of_checkpoint(Path(folder()))
    return of_memory(model)


def of_gguf(path: Path) -> Shape | None:
    from playground.models.scan import gguf_header

    header = gguf_header.read_header(path)
    parameters = sum(t.elements for t in header.tensors)
    return Shape(header.architecture, parameters, gguf_header.file_type(header)) if parameters else None


def of_checkpoint(folder: Path) -> Shape | None:
    from playground.models.scan.read import read_checkpoint

    fields = read_checkpoint(folder)
    if not fields["architecture"] or not fields["parameters"]:
        return None
    return Shape(fields["architecture"], int(fields["parameters"]), fields["quantization"])


def of_memory(model) -> Shape | None:
    """A model with no file behind it: its config's model_type, its tensors counted once each (tied
    weights are one tensor, as a file holds them), the dtype its config was made in."""
    config = getattr(model, "config", None)
    architecture = getattr(config, "model_type", "") if config is not None else ""
    if not architecture or not hasattr(model, "parameters"):
        return None
    seen, parameters = set(), 0
    for tensor in model.parameters():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            parameters += tensor.numel()
    dtype = str(getattr(config, "dtype", None) or next(model.parameters()).dtype).removeprefix("torch.")
    return Shape(architecture, parameters, dtype)
