"""What the snippets cannot say, or say only approximately."""

from __future__ import annotations

from playground.config import DRAFTER_LABELS, MODEL_FREE, TREE
from playground.export.equivalents import LOOKUP
from playground.export.settings import ExportSettings


def caveats(s: ExportSettings) -> list[str]:
    """What the snippets cannot say, or say only approximately."""
    e = s.equivalent
    notes = [n for n in (s.target_ref.note, s.draft_ref.note if e.uses_draft else "") if n]
    if e.differences:
        label = DRAFTER_LABELS[s.drafter]
        notes.append(f"{label[0].upper()}{label[1:]}: " + " ".join(e.differences.values()))
    if s.speculation == TREE:
        notes.append(
            f"Token tree (up to {s.tree_budget} nodes, {s.tree_depth} deep): vLLM's draft_model, ngram and "
            "suffix methods, llama.cpp and transformers' generate() each verify one chain a step, so the "
            f"snippets draft a chain of up to γ = {s.gamma} tokens."
        )
    if s.adaptive:  # each tool adapts a model's draft length only
        notes.append(
            "Adaptive γ: "
            + ('transformers\' "heuristic_transient" schedule is the same rule (no upper bound); '
               if e.transformers != LOOKUP else "transformers' prompt lookup drafts a fixed length; ")
            + (f"llama.cpp gets --spec-draft-n-min/--spec-draft-n-max {s.gamma_min}/{s.gamma_max}; "
               if "draft-simple" in e.llamacpp else "llama.cpp adapts only a draft model's length; ")
            + "vLLM has no per-request adaptive draft length, so it drafts a fixed γ."
        )
    if s.min_confidence and s.drafter not in MODEL_FREE:
        notes.append(
            "Draft confidence threshold: llama.cpp's --spec-draft-p-min and transformers' "
            "assistant_confidence_threshold are the same idea; vLLM has no such option."
        )
    if s.draft_vocab and e.uses_draft:
        notes.append(
            f"Draft vocabulary (first {s.draft_vocab} token ids): none of these tools has that knob for "
            "a draft model; there it drafts over its whole vocabulary."
        )
    if s.lookup:
        notes.append(
            f"Prompt lookup: vLLM tries n-grams of {s.ngram_min} to {s.ngram_max} tokens like here; "
            f"transformers from {s.ngram_max} down to 1; llama.cpp's ngram-simple matches exactly "
            f"{s.ngram_max} tokens."
        )
    notes.append(f"Runner ({s.runner}) is not exported: it sets what a step costs here, not which tokens are "
                 "accepted. vLLM compiles and captures CUDA graphs of its own (--enforce-eager turns that off), "
                 "llama.cpp runs its own kernels (the llamacpp runner here runs those same kernels on the "
                 "same GGUF file, so its costs are what llama-server's will be), transformers' generate() takes "
                 "cache_implementation=\"static\" with torch.compile for what the static and compiled runners do, "
                 "and the onnxruntime runner's build (onnxruntime-genai's model builder, int4, accuracy level 4, in "
                 "the playground's cache under onnx/) is a folder onnxruntime-genai's own Generator loads as it is.")
    notes.append("Quantization is not exported: each tool has its own (GGUF types, AWQ/GPTQ, bitsandbytes).")
    notes.append("The playground's int8-cpu and int4-cpu (weight-only, on PyTorch's CPU kernels, output layer in "
                 "int8) are closest to torchao's Int8WeightOnlyConfig and Int4WeightOnlyConfig (transformers' "
                 "TorchAoConfig) and to llama.cpp's Q8_0 and Q4_0 GGUF types.")
    return notes
