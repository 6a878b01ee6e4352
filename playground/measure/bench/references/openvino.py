"""What an OpenVINO user would run instead: OpenVINO GenAI's LLMPipeline on the pair's GGUF files,
plainly and with its own speculative decoding.

`python -m playground.bench --reference openvino` times, beside our runs, `openvino_genai.LLMPipeline`
on the GGUF file the target was loaded from (`model.gguf_file`, models/gguf_file.py: the file the
llama.cpp reference reads too), on the same prompt ids (an input_ids tensor: OpenVINO never tokenizes),
for the same token budget, stopping at the same end tokens.

Choices, so a reader can check them:
- tok/s = new tokens / wall seconds of the whole generate() call, prefill included, as ours; the
  first token's time is its own perf metrics' TTFT (from the call's start), so decode-only rates
  stand beside. Loading and compiling are outside the timing (once per target and setting);
- every call pays its prefill: LLMPipeline's default continuous-batching backend keeps prefix caching
  on (a repeated prompt would skip the prefill), so it is given a scheduler config with prefix
  caching off and an unlimited batch (its latency default otherwise);
- threads are ours (INFERENCE_NUM_THREADS = torch's thread count);
- an all-float32 file (the tiny pair's, read as F16) is computed in float32 with a float32 KV cache,
  so its greedy tokens can be held to ours when the weights are float16 values; a quantized file gets
  OpenVINO's own defaults (its u8 KV cache and dynamic quantization where it picks them): whether its
  tokens equal our baseline's is reported;
- its GGUF reader refuses an all-float32 file and Q5_0 weights, and `draft_model()` takes only an IR
  folder: openvino_files.py converts what it refuses (Q8_0, or F16 for float32 matrices) and has
  OpenVINO write the draft's IR, once, in the cache. The default target's Q4_K_M file is read as it is;
  the default draft's Q5_0 matrices become Q8_0 (larger, so its draft costs a little more than ours);
- speculative: that IR folder as its `draft_model` with `num_assistant_tokens` = γ, its acceptance from
  `extended_perf_metrics` (draft tokens generated, accepted);
- greedy only: its sampler and RNG are its own.
"""

from __future__ import annotations

import importlib.util
import sys
import weakref
from pathlib import Path

from playground.measure.bench.references import loops, openvino_files
from playground.measure.bench.references.llamacpp import gguf_path

INSTALL = ("python -m playground.serve setup openvino (it runs pip install openvino-genai; "
           "docs/runners.md, 'OpenVINO GenAI as a reference')")


def check_installed() -> None:
    """Before any model loads: --reference openvino needs openvino-genai."""
    if importlib.util.find_spec("openvino_genai") is None:
        raise ValueError(f"OpenVINO GenAI is not importable here (no module openvino_genai): {INSTALL}")


def model_file(model, role: str = "target") -> Path:
    """The GGUF file the model was loaded from, or an error naming what is missing."""
    path = gguf_path(model, "OpenVINO GenAI reads", role)
    if not path.is_file():
        raise ValueError(f"OpenVINO GenAI reads the {role}'s GGUF file, and {path} is not there (removed after "
                         "loading? load the pair again to fetch it)")
    return path


def float32_file(path: Path) -> bool:
    """Is every tensor of the GGUF file float32 (general.file_type ALL_F32)? Read from its header only."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    return field is not None and int(field.parts[field.data[0]][0]) == int(gguf.LlamaFileType.ALL_F32)


def properties(path: Path) -> dict:
    """Device properties: our thread count; float32 compute and cache for an all-float32 file."""
    import torch

    props = {"INFERENCE_NUM_THREADS": torch.get_num_threads()}
    if float32_file(path):
        props.update({"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    return props


PIPELINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {id(draft) or None: LLMPipeline}
REFUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {id(draft): why it has no pipeline}


def pipeline_for(target, draft=None, tokenizers=(None, None)):
    """OpenVINO GenAI's LLMPipeline over the target's IR (with the draft's as its draft model), made once
    per target and draft; `tokenizers` (target's, draft's: None when it shares the target's) stand in where
    a file's own cannot encode."""
    import openvino_genai as ov_genai

    mine = PIPELINES.setdefault(target, {})
    key = None if draft is None else id(draft)
    if key not in mine:
        path = model_file(target)
        scheduler = ov_genai.SchedulerConfig()
        scheduler.enable_prefix_caching = False  # every call pays its prefill, as ours does
        scheduler.max_num_batched_tokens = sys.maxsize  # the whole prompt in one step (its latency default)
        extra = {}
        if draft is not None:
            draft_path = model_file(draft, "draft")
            draft_props = properties(draft_path)
            folder = openvino_files.ir_folder(draft_path, draft_props, tokenizers[1] or tokenizers[0])
            extra["draft_model"] = ov_genai.draft_model(str(folder), "CPU", **draft_props)
        props = properties(path)
        folder = openvino_files.ir_folder(path, props, tokenizers[0])
        mine[key] = ov_genai.LLMPipeline(str(folder), "CPU", scheduler_config=scheduler, **extra, **props)
    return mine[key]


def speculative_problem(target, draft, tokenizers=(None, None)) -> str | None:
    """Why OpenVINO cannot run this pair speculatively (it could not build or load the draft), or
    None once its speculative pipeline is made. Said once on stderr, so the run goes on without it."""
    refused = REFUSED.setdefault(target, {})
    if id(draft) in refused:
        return refused[id(draft)]
    pipeline_for(target, tokenizers=tokenizers)  # the target's own file first: its failure is its own
    try:
        pipeline_for(target, draft, tokenizers)
        return None
    except (RuntimeError, ValueError) as error:
        lines = str(error).strip().splitlines()
        reason = next((line for line in lines if "gguf" in line.lower()), lines[0] if lines else type(error).__name__)
        refused[id(draft)] = f"OpenVINO GenAI cannot load the draft for speculative decoding ({reason.strip()})"
        print(f"--reference openvino: no speculative row: {refused[id(draft)]}", file=sys.stderr)
        return refused[id(draft)]


def generation_config(pipe, config, eos_token_ids, gamma: int | None):
    """Greedy, our token budget and end tokens (none: no stop at all), γ draft tokens a round."""
    gen = pipe.get_generation_config()
    gen.max_new_tokens = config.max_new_tokens
    gen.min_new_tokens = 0
    gen.do_sample = False
    gen.num_beams = 1
    gen.repetition_penalty = 1.0
    if eos_token_ids:  # its validate() wants eos_token_id among the stop ids
        gen.ignore_eos = False
        gen.stop_token_ids = {int(t) for t in eos_token_ids}
        gen.eos_token_id = int(eos_token_ids[0])
    else:  # no end token: its own (the file's) must not stop the run either; its stop ids stay as they are
        gen.ignore_eos = True
    if gamma is not None:
        gen.num_assistant_tokens = gamma
    return gen


def decode(target, prompt_ids, config, eos_token_ids, draft=None, tokenizers=(None, None),
           on_token=None) -> tuple[list[int], float, float | None, dict]:
    """(new tokens, wall seconds, seconds to the first token, speculative stats) of its own loop on
    one prompt, prefill included; with `draft`, its speculative decoding at γ = config.gamma.
    `on_token(token_ids)`, when given, is called as its streamer receives tokens (the Served tab's
    race); a true return stops the generation there (the page's Stop)."""
    import numpy as np
    import openvino as ov

    from playground.engine.generate import clock

    if config.temperature != 0:
        raise ValueError("--reference openvino is timed greedy (temperature 0): its sampler and RNG are its own")
    pipe = pipeline_for(target, draft, tokenizers)
    gen = generation_config(pipe, config, tuple(eos_token_ids), config.gamma if draft is not None else None)
    ids = ov.Tensor(np.asarray([list(prompt_ids)], dtype=np.int64))
    streamer = None if on_token is None else token_streamer(on_token)
    started = clock(target.device)
    result = pipe.generate(ids, gen, streamer)
    seconds = clock(target.device) - started
    tokens = [int(t) for t in result.tokens[0]][: config.max_new_tokens]
    eos = frozenset(eos_token_ids)
    cut = next((i for i, t in enumerate(tokens) if t in eos), None)
    tokens = tokens if cut is None else tokens[: cut + 1]
    ttft = result.perf_metrics.get_ttft().mean  # ms from the call's start to the first token
    first = ttft / 1000 if tokens and ttft > 0 else None
    return tokens, seconds, first, stats_of(result) if draft is not None else {}


def token_streamer(on_token):
    """An openvino_genai streamer that hands each token (or a speculative round's tokens) to on_token,
    and stops the generation when on_token returns true."""
    import openvino_genai as ov_genai

    class Tokens(ov_genai.StreamerBase):
        def write(self, token):
            stop = on_token([int(t) for t in token] if isinstance(token, (list, tuple)) else [int(token)])
            return ov_genai.StreamingStatus.STOP if stop else ov_genai.StreamingStatus.RUNNING

        def end(self):
            pass

    return Tokens()


def stats_of(result) -> dict:
    """Its own speculative counters for one generation: draft tokens generated and accepted."""
    metrics = getattr(result, "extended_perf_metrics", None)  # SDPerModelsPerfMetrics on a speculative call
    if metrics is None or not hasattr(metrics, "get_num_accepted_tokens"):
        return {}
    drafted = int(metrics.draft_model_metrics.get_num_generated_tokens())
    accepted = int(metrics.get_num_accepted_tokens())
    return {"draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else None,
            "main_generated_tokens": int(metrics.main_model_metrics.get_num_generated_tokens())}


def record_fields(runs: dict) -> dict:
    """One prompt's fields of this engine's loop (loops.record_fields)."""
    return loops.record_fields(runs, "openvino")


def summary_fields(records: list[dict], ours: dict) -> dict:
    """A group's summary of this engine's loop, its acceptance from its own counters (loops.summary_fields)."""
    return loops.summary_fields(records, ours, "openvino", "draft_tokens", "accepted_tokens")
