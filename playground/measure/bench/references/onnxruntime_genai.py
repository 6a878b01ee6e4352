"""What an ONNX Runtime user would run instead: onnxruntime-genai's own generation loop, plainly and
with its own speculative decoding, on the same built models as the onnxruntime runner.

`python -m playground.bench --reference onnxruntime-genai` times, beside our runs, its `Generator`
on the target's build (engine/runners/onnx_build.py: the same files our runner binds), on the same
prompt ids and token budget, stopping at the same end tokens, prefill included and the first token's
time kept, so decode-only rates stand beside. Its speculative run names the draft's build as
`model.draft` and drafts a fixed `speculative.max_draft_tokens` = γ a round; its acceptance comes
from `Generator.get_speculative_stats()` (drafted and accepted tokens, pooled over the prompts). Threads are set to ours (its default used one here).
Greedy only: its sampler and RNG are its own, and a sampled row would compare two distributions'
draws, not two speeds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import weakref

from playground.measure.bench.references import loops

INSTALL = "onnxruntime-genai is in requirements.txt: pip install -r requirements.txt"


def check_installed() -> None:
    """Before any model loads: --reference onnxruntime-genai needs onnxruntime-genai."""
    if importlib.util.find_spec("onnxruntime_genai") is None:
        raise ValueError(f"onnxruntime-genai is not importable here: {INSTALL}")


def overlay(target_folder, draft_folder, gamma: int | None, threads: int) -> dict:
    """The genai_config.json overlay: our thread count, and for a speculative run the draft's build
    as model.draft (its own decoder section, its file by a path relative to the target's folder, which
    is how onnxruntime-genai resolves it) with γ draft tokens a round."""
    session = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    text = {"model": {"decoder": {"session_options": session}}}
    if draft_folder is not None:
        decoder = json.loads((draft_folder / "genai_config.json").read_text())["model"]["decoder"]
        where = os.path.relpath(draft_folder / decoder["filename"], target_folder)
        draft = {**decoder, "filename": where, "session_options": session}
        text["model"]["draft"] = draft
        text["speculative"] = {"max_draft_tokens": gamma}
    return text


GENERATORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> {(draft?, γ): og.Model}


def model_for(target, draft, gamma: int | None):
    """onnxruntime-genai's Model over the target's build (and the draft's), made once per setting; of the
    speculative ones only the latest γ's is kept (a sweep's cells run one γ after another)."""
    import onnxruntime_genai as og
    import torch

    from playground.engine.runners.onnx_build import built_model

    key = (draft is not None, gamma)
    mine = GENERATORS.setdefault(target, {})
    if key not in mine:
        for held in [k for k in mine if k[0] and key[0]]:  # another γ's speculative model: its cell is done
            del mine[held]  # (each holds both builds' sessions, 1.8 GB for the default pair)
        draft_folder = built_model(draft).folder if draft is not None else None
        mine[key] = own_model(built_model(target).folder, draft_folder, gamma, torch.get_num_threads())
    return mine[key]


def own_model(target_folder, draft_folder, gamma: int | None, threads: int):
    """Its Model over a target build's folder (and a draft build's, for its speculative decoding)."""
    import onnxruntime_genai as og

    config = og.Config(str(target_folder))
    config.overlay(json.dumps(overlay(target_folder, draft_folder, gamma, threads)))
    return og.Model(config)


def decode(target, prompt_ids, config, eos_token_ids, draft=None) -> tuple[list[int], float, float | None, dict]:
    """(new tokens, wall seconds, seconds to the first token, speculative stats) of its own loop on
    one prompt, prefill included; with `draft`, its speculative decoding at γ = config.gamma."""
    from playground.engine.generate import clock

    if config.temperature != 0:
        raise ValueError("--reference onnxruntime-genai is timed greedy (temperature 0): its sampler and RNG "
                         "are its own")
    model = model_for(target, draft, config.gamma if draft is not None else None)
    return own_loop(model, prompt_ids, config.max_new_tokens, eos_token_ids, lambda: clock(target.device),
                    draft is not None)


def own_loop(model, prompt_ids, max_new_tokens: int, eos_token_ids, now, speculative: bool = False):
    """Its Generator on one prompt, greedy, as its own examples drive it: (new tokens, wall seconds,
    seconds to the first token, speculative stats). `now()`: the clock. Needs no torch, so a process of
    its own can run it with nothing of ours loaded (measure/hardware/apart.py)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt_ids) + max_new_tokens)
    eos, tokens, first = frozenset(eos_token_ids), [], None
    started = now()
    generator = og.Generator(model, params)  # a fresh cache: the prefill is paid, as ours pays it
    generator.append_tokens([list(prompt_ids)])
    while not generator.is_done() and len(tokens) < max_new_tokens:
        generator.generate_next_token()
        tokens.extend(int(t) for t in generator.get_next_tokens())
        first = now() - started if first is None else first
        if eos & set(tokens):
            tokens = tokens[: min(i for i, t in enumerate(tokens) if t in eos) + 1]
            break
    seconds = now() - started
    return tokens[:max_new_tokens], seconds, first, stats_of(generator) if speculative else {}


STATS = ("rounds", "draft_tokens_proposed", "draft_tokens_accepted", "target_forward_passes", "acceptance_rate",
         "avg_draft_ms_per_token", "avg_target_ms_per_round")  # of Generator.get_speculative_stats()'s dict


def stats_of(generator) -> dict:
    """Its own speculative counters for one generation: drafts, acceptance, forwards and timings."""
    stats = generator.get_speculative_stats()
    return {name: stats[name] for name in STATS if name in stats}


def record_fields(runs: dict) -> dict:
    """One prompt's fields of this engine's loop (loops.record_fields)."""
    return loops.record_fields(runs, "ortgenai")


def summary_fields(records: list[dict], ours: dict) -> dict:
    """A group's summary of this engine's loop, its acceptance from its own counters (loops.summary_fields)."""
    return loops.summary_fields(records, ours, "ortgenai", "draft_tokens_proposed", "draft_tokens_accepted")
