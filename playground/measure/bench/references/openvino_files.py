"""The files OpenVINO GenAI reads for a pair: a GGUF file its reader takes, and an IR folder for the draft.

Its GGUF reader (openvino-genai 2026.4) builds the model from F16, Q8_0, Q4_K and Q6_K weights (and
F32 norms and biases); it refuses an all-float32 file (the tiny pair's) and Q5_0 weights (most of the
default draft's file). Its `draft_model()` takes only an IR folder. So:
- `readable_gguf` returns the model's own file when the reader takes it (the default target's
  Q4_K_M file), else a converted copy in the cache: each refused tensor re-quantized to Q8_0, the
  nearest format it reads (float32 matrices written as F16, exact for weights that are already
  float16 values); everything else, metadata and tokenizer included, copied as it is;
- `ir_folder` has OpenVINO GenAI itself turn that GGUF file into IR once (`enable_save_ov_model`, its
  own GGUF-to-IR path, so the IR is what it would have built in memory), for `draft_model()`, and
  for the target too, so both load alike and fast.
Both are cached per source file's sha256, written in a temp folder and renamed only when whole, so a
half-written conversion is never trusted.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

IR_FILE = "openvino_model.xml"


def kept_types():
    """The GGUF tensor types OpenVINO GenAI's reader builds a model from, kept as they are."""
    from gguf import GGMLQuantizationType as Q

    return frozenset({Q.F16, Q.Q8_0, Q.Q4_K, Q.Q6_K})


def refused_tensors(path: Path) -> list[str]:
    """The tensors of a GGUF file its reader refuses: matrices in a type it does not read (a float32
    vector, a norm or a bias, it reads)."""
    import gguf

    keep = kept_types()
    return [t.name for t in gguf.GGUFReader(str(path)).tensors
            if t.tensor_type not in keep and not (t.tensor_type == gguf.GGMLQuantizationType.F32 and len(t.shape) == 1)]


def convert(source: Path, out: Path) -> None:
    """Copy a GGUF file with each refused matrix re-quantized: float32 to F16, anything else to Q8_0."""
    import gguf
    import numpy as np
    from tqdm import tqdm

    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(out), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":  # the writer writes these itself
            continue
        if name == "general.file_type" and field.contents() == int(gguf.LlamaFileType.ALL_F32):
            writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)  # the reader refuses an ALL_F32 file outright
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    keep, F32 = kept_types(), gguf.GGMLQuantizationType.F32
    for tensor in tqdm(reader.tensors, desc=f"converting {source.name} for OpenVINO", unit="tensor", file=sys.stderr):
        if tensor.tensor_type in keep or (tensor.tensor_type == F32 and len(tensor.shape) == 1):
            writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
            continue
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists dimensions innermost first
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float32)
        kind = gguf.GGMLQuantizationType.F16 if tensor.tensor_type == F32 else gguf.GGMLQuantizationType.Q8_0
        data = values.astype(np.float16) if kind == gguf.GGMLQuantizationType.F16 else gguf.quants.quantize(values, kind)
        writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def cached_folder(source: Path, kind: str, make) -> Path:
    """<cache>/openvino/<stem>-<kind>-<sha256[:16] of the source>, made by make(folder) in a temp folder
    renamed when whole; an existing one is finished (renames are atomic)."""
    from playground.config import cache_dir
    from playground.models.cachefiles import replace_folder, sha256_of

    parent = cache_dir() / "openvino"
    folder = parent / f"{source.stem}-{kind}-{sha256_of(source)[:16]}"
    if folder.is_dir():
        return folder
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".making-", dir=parent))
    try:
        make(work)
        replace_folder(work, folder, lambda done: done.is_dir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def readable_gguf(path: Path) -> Path:
    """The model's GGUF file when OpenVINO's reader takes it, else its converted copy (made once)."""
    if not refused_tensors(path):
        return path
    return cached_folder(path, "gguf", lambda work: convert(path, work / "model.gguf")) / "model.gguf"


def ir_folder(path: Path, properties: dict, tokenizer=None) -> Path:
    """An IR folder OpenVINO GenAI built from the GGUF file (made once), for LLMPipeline and draft_model().

    Its speculative pipeline encodes a test sentence with both models' tokenizers to check that they
    match. A tokenizer it converted from the file that cannot encode (the tiny pair's one-merge
    vocabulary) is replaced by openvino_tokenizers' conversion of `tokenizer`, the model's own."""
    import openvino_genai as ov_genai

    def make(work: Path) -> None:
        readable = readable_gguf(path)
        print(f"OpenVINO GenAI: writing {path.name} as an IR folder (once)", file=sys.stderr)
        (work / "model.gguf").symlink_to(readable)  # it saves the IR beside the file it reads
        ov_genai.LLMPipeline(str(work / "model.gguf"), "CPU", enable_save_ov_model=True, **properties)
        (work / "model.gguf").unlink()
        if not (work / IR_FILE).is_file():
            raise RuntimeError(f"OpenVINO GenAI wrote no {IR_FILE} for {path.name} (enable_save_ov_model)")
        if not encodes(work):
            write_tokenizer(work, tokenizer, path)

    return cached_folder(path, "ir", make)


PROBE = "Could you please tell me something about OpenVINO.GenAI?"  # what its speculative check encodes


def encodes(folder: Path) -> bool:
    """Does the folder's tokenizer encode a sentence?"""
    import openvino_genai as ov_genai

    try:
        ov_genai.Tokenizer(str(folder)).encode(PROBE)
        return True
    except RuntimeError:
        return False


def write_tokenizer(folder: Path, tokenizer, path: Path) -> None:
    """Our tokenizer as the folder's OpenVINO tokenizer and detokenizer (openvino_tokenizers)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer

    if tokenizer is None:
        raise RuntimeError(f"OpenVINO GenAI cannot encode text with the tokenizer of {path.name}, and no "
                           "tokenizer was given to replace it")
    encoder, decoder = convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(encoder, str(folder / "openvino_tokenizer.xml"))
    ov.save_model(decoder, str(folder / "openvino_detokenizer.xml"))


def write_pair_irs(pair: str, say=print) -> None:
    """Each model of a registry pair as IR in the cache, from the GGUF file it loads from
    (`python -m playground.serve setup openvino --pair NAME` runs this module)."""
    import os

    from playground.config import RunConfig
    from playground.measure.bench.served.deploy import gguf_settings
    from playground.models.registry import load_registry

    registry = load_registry()
    if registry.pair(pair).random_weights:
        raise SystemExit(f"pair {pair!r} has random weights, written when it loads: its IR is made on first use")
    settings = gguf_settings(registry, RunConfig(pair=pair))
    for role, ref in (("target", settings.target_ref), ("draft", settings.draft_ref)):
        folder = ir_folder(Path(ref.gguf), {"INFERENCE_NUM_THREADS": os.cpu_count() or 1})
        say(f"[setup openvino] {role} {ref.name}: {folder}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m playground.measure.bench.references.openvino_files",
                                     description="write a pair's OpenVINO IR into the cache")
    parser.add_argument("--pair", required=True)
    write_pair_irs(parser.parse_args().pair)
