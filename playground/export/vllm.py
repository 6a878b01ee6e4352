"""vLLM: `vllm serve` with --speculative-config, and its Python API, for the run's drafter. The launcher
(measure/bench/served) starts the same arguments, so what a user pastes is what the served race ran."""

from __future__ import annotations

import json
import shlex

from playground.export.equivalents import difference_comment
from playground.export.settings import CHECKED, EXAMPLE_MESSAGE, ExportSettings

# SpeculativeConfig fields this module emits, each read in vllm/config/speculative.py.
VLLM_KEYS = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "draft_sample_method",
    }
)
VLLM_METHODS = ("draft_model", "ngram", "suffix")  # what vllm_config writes
METHOD_LABELS = {  # the second deployment's comment in vllm_serve
    "draft_model": "a draft model",
    "ngram": "n-gram prompt lookup, no draft model",
    "suffix": "suffix decoding, no draft model (pip install arctic-inference into vLLM's environment)",
}


def vllm_config(s: ExportSettings, method: str | None = None) -> dict:
    """--speculative-config / speculative_config for the drafter (or `method`, one of VLLM_METHODS)."""
    method = method or s.equivalent.vllm[0]
    if method not in VLLM_METHODS:
        raise ValueError(f"method must be one of: {', '.join(VLLM_METHODS)}, got {method!r}")
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": s.gamma,
            "prompt_lookup_max": s.ngram_max,
            "prompt_lookup_min": s.ngram_min,
        }
    if method == "suffix":  # γ is its upper bound: suffix decoding sizes each draft by the match it finds
        return {"method": "suffix", "num_speculative_tokens": s.gamma}
    config = {
        "method": "draft_model",
        "model": s.draft_ref.checkpoint("draft"),
        "num_speculative_tokens": s.gamma,
    }
    if not s.greedy:  # the draft samples and q enters min(1, p/q), as here (vLLM's default drafts greedily)
        config["draft_sample_method"] = "probabilistic"
    return config


def vllm_sampling(s: ExportSettings) -> dict:
    return {"temperature": float(s.temperature), "top_k": s.top_k, "top_p": float(s.top_p)}


def vllm_serve(s: ExportSettings) -> str:
    first, other = s.equivalent.vllm
    lines = [
        f"# {CHECKED['vllm']}",
        "# --generation-config vllm: ignore the model's own sampling defaults (e.g. a repetition penalty);",
        "# the override makes the playground's sampling the server's default (a request may set its own).",
        difference_comment(s.equivalent, "vllm") + serve_command(s, first),
        "",
        "# the other method: " + METHOD_LABELS[other],
        serve_command(s, other),
    ]
    return "\n".join(lines) + "\n"


PLAIN = "plain"  # a deployment with no --speculative-config: the baseline a served race compares to


def vllm_serve_args(s: ExportSettings, method: str | None = None) -> list[str]:
    """`vllm serve`'s arguments (the model first) for `method` ('draft_model', 'ngram', or PLAIN for
    no speculation). The exported text and the launcher are both built here, so what a user pastes is
    what the served race ran."""
    args = [s.target_ref.checkpoint("target")]
    if method != PLAIN:
        args += ["--speculative-config", json.dumps(vllm_config(s, method))]
    return args + ["--generation-config", "vllm",
                   "--override-generation-config", json.dumps(vllm_sampling(s))]


def serve_command(s: ExportSettings, method: str) -> str:
    model, *flags = vllm_serve_args(s, method)
    pairs = [f"{flag} {shlex.quote(value)}" for flag, value in zip(flags[::2], flags[1::2])]
    return " \\\n  ".join([f"vllm serve {shlex.quote(model)}", *pairs])


def vllm_python(s: ExportSettings) -> str:
    config = vllm_config(s)
    sampling = ", ".join(f"{k}={v!r}" for k, v in vllm_sampling(s).items())
    return (
        f"# {CHECKED['vllm']}\n"
        + difference_comment(s.equivalent, "vllm")
        + "from vllm import LLM, SamplingParams\n\n"
        "llm = LLM(\n"
        f"    model={s.target_ref.checkpoint('target')!r},\n"
        f"    speculative_config={config!r},\n"
        '    generation_config="vllm",  # the model\'s own sampling defaults would change the task\n'
        ")\n"
        f"params = SamplingParams({sampling}, seed={s.seed}, max_tokens={s.max_new_tokens})\n"
        f'outputs = llm.chat([{{"role": "user", "content": {EXAMPLE_MESSAGE!r}}}], params)\n'
        "print(outputs[0].outputs[0].text)\n"
    )
