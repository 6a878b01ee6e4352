"""The Served tab's third engine: OpenVINO GenAI's own loop on the pair (its LLMPipeline, plainly and
with its draft model), raced on the page's prompt like the two servers.

It runs in this process, not behind a URL: the pair is loaded as every tab loads it, and OpenVINO
reads the models' GGUF files through the IR the benchmark's reference writes once
(measure/bench/references/openvino.py). The prompt is encoded by our tokenizer and sent as ids, greedy
only (its sampler is its own). Each token's arrival time comes from its streamer, so the page draws
the same tokens-over-time and running-speedup plots; acceptance is its own count (accepted / drafted:
no per-position figure).
"""

from __future__ import annotations

import time

from playground.measure.bench.served.counters import SpecCounters


def check(form, run) -> None:
    """What OpenVINO cannot take, before anything loads (ValueError naming the field)."""
    from playground.measure.bench.references.openvino import check_installed

    if any(form.urls):
        raise ValueError("engine OpenVINO GenAI runs in this process: leave both server URLs empty")
    if form.method != "draft_model":
        raise ValueError("method: OpenVINO GenAI drafts with a draft model here; choose draft_model")
    if run.temperature != 0:
        raise ValueError("temperature: OpenVINO GenAI is raced greedy (temperature 0): its sampler is its own")
    check_installed()


def timed_decode(pair, ids, run, draft, stopped=lambda: False):
    """(token times from the call's start, token ids, its speculative stats) of one OpenVINO run;
    `stopped()`, asked at every token its streamer hands on, ends the run there."""
    from playground.engine.factory import Models
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.references import openvino

    models = Models.of(pair)
    config = SpecConfig(gamma=run.gamma, max_new_tokens=run.max_new_tokens, temperature=0.0)
    times, began = [], time.perf_counter()

    def on_token(token_ids):
        times.extend([time.perf_counter() - began] * len(token_ids))
        return stopped()

    tokens, _, _, stats = openvino.decode(pair.target.model, ids, config, pair.eos, draft,
                                          (models.target_tokenizer, models.draft_tokenizer), on_token)
    return times[: len(tokens)], tokens, stats


def race(pair, prompt_ids, run, stopped=lambda: False):
    """Both runs, plain then speculative: ({name: token times}, {name: token ids}, its counters).
    `stopped()` true ends the run at the next token and skips what is left."""
    times, tokens = {}, {}
    times["plain"], tokens["plain"], _ = timed_decode(pair, prompt_ids, run, None, stopped)
    times["speculative"], tokens["speculative"], stats = ([], [], {}) if stopped() else \
        timed_decode(pair, prompt_ids, run, pair.draft.model, stopped)
    counters = SpecCounters(draft_tokens=stats.get("draft_tokens", 0), accepted_tokens=stats.get("accepted_tokens", 0))
    return times, tokens, counters
