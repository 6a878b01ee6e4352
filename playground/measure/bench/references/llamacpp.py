"""What a CPU user would run instead: llama.cpp's own plain decoding of the same GGUF file.

`python -m playground.bench --reference llama.cpp` times, beside our runs, llama-cpp-python's
high-level `Llama.generate()` on the GGUF file the target was loaded from (`model.gguf_file`,
models/gguf_file.py), on the same prompt token ids, for the same number of new tokens, stopping
at the same end tokens. This is llama.cpp's decode loop, not our engine on its kernels (that is
the `llamacpp` runner): a row that answers "faster than what?" with the fastest plain decoding
a CPU user has.

Choices, so a reader can check them:
- tok/s = new tokens / wall seconds of the whole call, prefill included, as ours (runs.py);
  loading the file and opening its context are outside the timing (once per target, reopened
  larger only when a prompt needs more room);
- every call starts from an empty cache (`reset()`, then `generate(reset=False)`): the
  prompt-prefix reuse of `generate()` would otherwise skip the prefill on every repeat;
- greedy (T = 0) is llama.cpp's greedy sampler. For T > 0 its own sampler runs with our
  temperature, top-k and top-p (min-p, typical-p and the repeat penalty off), but its RNG is not
  ours and it cuts top-k and top-p before applying the temperature: the tokens differ by design;
- the context is what the llamacpp runner opens, so the two differ only in the decode loop: an
  all-float32 file (the tiny pair's) keeps a float32 cache without flash attention, so its greedy
  tokens can be held to ours; a quantized file gets llama.cpp's own defaults, a float16 cache and
  flash attention (what its `auto` picks on a CPU; llama-cpp-python's `Llama` would turn it off, and
  on the default pair's coding prompt 122 that alone flips a first token whose top-2 margin is
  0.004). Our eager or compiled runs may still break such a near-tie the other way: whether its
  tokens equal our baseline's is reported, never assumed.
"""

from __future__ import annotations

import importlib.util
import weakref
from pathlib import Path

from playground.measure.bench.totals import rate

INSTALL = ("install llama-cpp-python, the optional extra, built from its source distribution: "
           "python -m playground.serve setup llamacpp (docs/runners.md, 'Run on llama.cpp's kernels')")
CONTEXT = 4096  # entries of the context a target's file is opened with; doubled while a prompt needs more
BATCH = 512  # prompt tokens one llama_decode takes


def check_installed() -> None:
    """Before any model loads: --reference llama.cpp needs the optional extra."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ValueError(f"llama.cpp needs llama_cpp, which is not importable here: {INSTALL}")


def gguf_path(model, reader: str = "llama.cpp decodes", role: str = "target") -> Path:
    """The GGUF file the model was loaded from, or an error naming what has one (`reader`: which
    engine reads it, as the message says)."""
    locate = getattr(model, "gguf_file", None)  # models/gguf_file.record: a callable -> the file's path
    if locate is None:
        name = getattr(model, "name_or_path", None) or type(model).__name__
        raise ValueError(f"{reader} the GGUF file the {role} was loaded from, and {role} {name!r} "
                         "was not loaded from one: choose a pair whose target is a model pack, a local .gguf "
                         "or a hub gguf_file source (the default pair is), or the tiny pair")
    return Path(locate())


class PlainDecoder:
    """One target's GGUF file opened by llama-cpp-python, with its context."""

    def __init__(self, path: Path):
        self.path, self.llm, self.n_ctx = path, None, 0

    def room(self, entries: int):
        """The Llama, its context holding at least `entries` (reopened larger when it does not)."""
        if entries > self.n_ctx:
            import torch

            from playground.engine.runners.llamacpp import float32_file, llama

            llama_cpp = llama()  # imported with llama.cpp's own log silenced (verbose=False misses some)

            n_ctx = CONTEXT
            while n_ctx < entries:
                n_ctx *= 2
            exact = float32_file(self.path)
            cache = {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32} if exact else {}
            threads = torch.get_num_threads()  # what our engine computes with
            if self.llm is not None:
                self.llm.close()
            self.llm = llama_cpp.Llama(model_path=str(self.path), n_ctx=n_ctx, n_batch=BATCH, n_threads=threads,
                                       n_threads_batch=threads, n_gpu_layers=0, flash_attn=not exact,
                                       verbose=False, **cache)
            self.n_ctx = n_ctx
        return self.llm


DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> PlainDecoder, freed with it


def decoder_for(model) -> PlainDecoder:
    if model not in DECODERS:
        DECODERS[model] = PlainDecoder(gguf_path(model))
    return DECODERS[model]


def sampler_options(config) -> dict:
    """generate() arguments for our settings, all explicit (its defaults sample with min-p 0.05)."""
    options = {"top_k": config.top_k, "top_p": config.top_p, "min_p": 0.0, "typical_p": 1.0,
               "repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
    return {**options, "temp": 0.0} if config.temperature == 0 else {**options, "temp": config.temperature}


def plain_decode(target, prompt_ids, config, eos_token_ids) -> tuple[list[int], float, float | None]:
    """(new tokens, wall seconds, seconds to the first token) of llama.cpp's own decoding of one
    prompt, prefill included. Like ours, an end token is emitted and ends the run; so does the
    token budget."""
    from playground.engine.generate import clock

    ids, eos = list(prompt_ids), frozenset(eos_token_ids)
    llm = decoder_for(target).room(len(ids) + config.max_new_tokens + 1)  # loading is not timed
    llm.set_seed(config.seed)  # its sampler is made from this seed on every call: repeats agree
    tokens: list[int] = []
    first = None
    started = clock(target.device)
    llm.reset()  # an empty cache: no prefix of an earlier call is reused, the prefill is paid
    if config.max_new_tokens > 0:
        for token in llm.generate(ids, reset=False, **sampler_options(config)):
            tokens.append(token)
            first = clock(target.device) - started if first is None else first
            if token in eos or len(tokens) >= config.max_new_tokens:
                break
    return tokens, clock(target.device) - started, first


def record_fields(runs: dict, config) -> dict:
    """One prompt's llama.cpp fields, beside transformers' (runs.reference_fields): its speed,
    ours over it, and (greedy) whether its tokens equal our baseline's, and where they part."""
    cpp, base, spec = runs["llamacpp"], runs["baseline"], runs["speculative"]
    greedy = config.temperature == 0
    parted = next((i for i, (a, b) in enumerate(zip(cpp.tokens, base.tokens)) if a != b),
                  None if len(cpp.tokens) == len(base.tokens) else min(len(cpp.tokens), len(base.tokens)))
    fields = {
        "llamacpp_new_tokens": len(cpp.tokens),
        "llamacpp_seconds": cpp.seconds,
        "llamacpp_tok_s": cpp.tok_s,
        **cpp.decode_fields("llamacpp"),
        "llamacpp_resident_mb": cpp.resident_bytes / 2**20,  # measured: what its first call added
        "baseline_over_llamacpp": base.tok_s / cpp.tok_s if cpp.tok_s else 0.0,
        "speculative_over_llamacpp": spec.tok_s / cpp.tok_s if cpp.tok_s else 0.0,
        # greedy: a different runtime on the same file; a near-tie may go the other way (reported)
        "llamacpp_identical": cpp.tokens == base.tokens if greedy else None,
        "llamacpp_first_divergence": parted if greedy else None,
        "llamacpp_sampling": "greedy" if greedy else "llama.cpp's own sampler and RNG",
    }
    if "tree" in runs:
        fields["tree_over_llamacpp"] = runs["tree"].tok_s / cpp.tok_s if cpp.tok_s else 0.0
    return fields


def summary_fields(records: list[dict], ours: dict) -> dict:
    """A group's llama.cpp summary, pooled as summary.py pools transformers': a total-token rate,
    medians of the per-prompt ratios, identity over the greedy prompts."""
    from statistics import median

    cpp = rate(records, "llamacpp_new_tokens", "llamacpp_seconds")
    decode = rate(records, "llamacpp_decode_tokens", "llamacpp_decode_seconds")
    flags = [r["llamacpp_identical"] for r in records if r["llamacpp_identical"] is not None]
    fields = {
        "llamacpp_tok_s": cpp,
        "llamacpp_decode_tok_s": decode,
        "llamacpp_resident_mb": max(r.get("llamacpp_resident_mb", 0) for r in records),
        "baseline_over_llamacpp": ours["baseline_tok_s"] / cpp if cpp else 0.0,
        "speculative_over_llamacpp": median(r["speculative_over_llamacpp"] for r in records),
        "speculative_over_llamacpp_total": ours["speculative_tok_s"] / cpp if cpp else 0.0,
        "llamacpp_identical": all(flags) if flags else None,
        "llamacpp_identical_prompts": sum(flags) if flags else None,
    }
    if "tree_over_llamacpp" in records[0]:
        fields["tree_over_llamacpp"] = median(r["tree_over_llamacpp"] for r in records)
    return fields
