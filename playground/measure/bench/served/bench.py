"""`python -m playground.bench --served vllm|llamacpp|URL[,URL]`: vLLM or llama.cpp's llama-server,
plain and speculative, on the same prompts as our engine, in the same report schema (a run per
speculative deployment, its baseline the plain deployment), plus a concurrency curve: aggregate
tok/s and per-request latency at 1, 2, 4, 8 simultaneous requests, and where speculation stops
paying."""

from __future__ import annotations

import statistics
import threading
import time
from contextlib import ExitStack
from dataclasses import replace

from playground.config import MODEL, PROMPT_LOOKUP
from playground import export
from playground.measure.bench.served.client import ServedClient
from playground.measure.bench.served.counters import SpecCounters, parse_vllm_metrics
from playground.measure.bench.served.deploy import METHODS, Deployment

METHOD_DRAFTER = {"draft_model": MODEL, "ngram": PROMPT_LOOKUP}


def counters(client: ServedClient) -> SpecCounters:
    """vLLM's counters now; zero where the server has no /metrics (llama.cpp reports per request)."""
    from playground.measure.bench.served.client import ServedError

    try:
        return parse_vllm_metrics(client.metrics_text())
    except (ServedError, ValueError):
        return SpecCounters()


def sampling_of(run) -> dict:
    return {"temperature": run.temperature, "seed": run.seed, "top_k": run.top_k, "top_p": run.top_p}


def time_prompt(client: ServedClient, ids: list[int], run, repeats: int, ignore_eos: bool = False) -> dict:
    """One prompt `repeats` times, sequentially: median seconds, tokens, and the counters it spent."""
    before, outs = counters(client), []
    for _ in range(repeats):
        outs.append(client.complete(ids, run.max_new_tokens, ignore_eos=ignore_eos, **sampling_of(run)))
    spent = counters(client) - before
    if not spent.draft_tokens and outs[-1].timings:  # llama.cpp: its own per-completion figures
        from playground.measure.bench.served.counters import from_llamacpp_timings
        spent = from_llamacpp_timings(outs[-1].timings)
    seconds = statistics.median(o.elapsed_s for o in outs)
    return {"tokens": outs[-1].tokens, "seconds": seconds, "token_ids": outs[-1].token_ids, "text": outs[-1].text,
            "first_token_s": statistics.median(o.first_token_s or 0.0 for o in outs),
            "drafts": spent.drafts, "drafted": spent.draft_tokens, "accepted": spent.accepted_tokens,
            "accepted_by_position": list(spent.by_position)}


def concurrency_point(client: ServedClient, prompts: list[list[int]], n: int, run) -> dict:
    """n requests at once (prompt i mod len): aggregate tok/s = all tokens / wall time from the
    first send to the last token; latency per request. Fixed length (ignore EOS), so every level
    asks for the same work per request."""
    outs, errors, start_line = [None] * n, [], threading.Barrier(n + 1)

    def one(i):
        start_line.wait()
        try:
            outs[i] = client.complete(prompts[i % len(prompts)], run.max_new_tokens, ignore_eos=True,
                                      **sampling_of(run))
        except Exception as e:  # reported below, naming the request
            errors.append(f"request {i}: {e}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    start_line.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"concurrency {n}: " + "; ".join(errors))
    tokens = sum(o.tokens for o in outs)
    latencies = [o.elapsed_s for o in outs]
    return {"concurrency": n, "tokens": tokens, "wall_s": wall, "aggregate_tok_s": tokens / wall,
            "latency_s_median": statistics.median(latencies), "latency_s_max": max(latencies),
            "whole": all(o.whole for o in outs)}


def concurrency_curve(client: ServedClient, prompts, levels, run, progress=lambda text: None) -> list[dict]:
    points = []
    for n in levels:
        points.append(concurrency_point(client, prompts, n, run))
        progress(f"concurrency {n}: {points[-1]['aggregate_tok_s']:.2f} tok/s")
    return points


def crossover(plain: list[dict], spec: list[dict]) -> int | None:
    """The first concurrency at which the speculative deployment's aggregate tok/s falls below the
    plain one's: where speculation stops paying on this machine (None: it never did here)."""
    for a, b in zip(plain, spec):
        if b["aggregate_tok_s"] < a["aggregate_tok_s"]:
            return b["concurrency"]
    return None


def run_record(prompt, base: dict, spec: dict, greedy: bool) -> dict:
    """A per-prompt record in the engine's report's names (measure/bench/runs.py)."""
    base_rate = base["tokens"] / base["seconds"] if base["seconds"] else 0.0
    spec_rate = spec["tokens"] / spec["seconds"] if spec["seconds"] else 0.0
    return {"id": prompt.id, "category": prompt.category,
            "baseline_new_tokens": base["tokens"], "baseline_seconds": base["seconds"],
            "new_tokens": spec["tokens"], "speculative_seconds": spec["seconds"],
            "baseline_tok_s": base_rate, "speculative_tok_s": spec_rate,
            "speedup": spec_rate / base_rate if base_rate else 0.0,
            "first_token_s": spec["first_token_s"], "baseline_first_token_s": base["first_token_s"],
            "drafts": spec["drafts"], "drafted": spec["drafted"], "accepted": spec["accepted"],
            "accepted_by_position": spec["accepted_by_position"],
            "identical": same_output(base, spec) if greedy else None,
            "baseline_text": base["text"], "text": spec["text"]}  # held to our engine's by --peers


def same_output(base: dict, spec: dict) -> bool:
    """Token ids where the server streams them (vLLM), and the text always (llama.cpp's OpenAI stream
    carries no ids)."""
    return spec["token_ids"] == base["token_ids"] and spec.get("text") == base.get("text")


def summarize(records: list[dict]) -> dict:
    """The engine's rate and identity summary (measure/bench/summary.py), with the server's own
    acceptance figures in place of the engine's pooled α, c and v (a server reports no step costs)."""
    from playground.measure.bench.summary import identity_summary, rate_summary
    from playground.measure.bench.totals import total

    if not records:
        return {"prompts": 0}
    accepted, drafted, drafts = (total(records, k) for k in ("accepted", "drafted", "drafts"))
    return {"prompts": len(records), **rate_summary(records), **identity_summary(records),
            "alpha": accepted / drafted if drafted else None,
            "mean_accepted_tokens": (accepted + drafts) / drafts if drafts else None}


def settings_for(run, method: str) -> dict:
    from playground.measure.bench.report import settings_of

    drafter = METHOD_DRAFTER.get(method, run.drafter)
    return {**settings_of(replace(run, drafter=drafter)), "deployment": method}


def measure_deployment(dep: Deployment, encoded, run, repeats: int, warmup: int, levels, say) -> dict:
    """Every prompt on one deployment (sequential requests), then its concurrency curve."""
    client = dep.client()
    for _ in range(warmup):  # the first request pays for lazy allocations, as the engine's warm-up
        client.complete(encoded[0][1], min(8, run.max_new_tokens), **sampling_of(run))
    timed = []
    for i, (prompt, ids) in enumerate(encoded):
        timed.append(time_prompt(client, ids, run, repeats))
        say(f"{dep.name}: prompt {i + 1}/{len(encoded)} {prompt.category}/{prompt.id}: "
            f"{timed[-1]['tokens'] / timed[-1]['seconds']:.2f} tok/s")
    curve = concurrency_curve(client, [ids for _, ids in encoded], levels, run,
                              lambda text: say(f"{dep.name}: {text}"))
    held = dep.server.resident_bytes() if dep.server is not None else None  # an attached URL's is not ours to read
    return {"deployment": {**dep.describe(), "resident_mb": held / 2**20 if held is not None else None},
            "timed": timed, "concurrency": curve}


def measured_deployments(engine: str, urls: list[str], settings, methods, placement, measure, say,
                         parallel: int = 1):
    """Measure each deployment: servers started here one at a time (each stopped before the next
    starts; a llama-server with `parallel` slots), or the attached URLs in order."""
    from playground.measure.bench.served.deploy import attached, start_deployment

    if engine == "urls":
        return [measure(dep) for dep in attached(urls)]
    out = []
    for method in methods:
        with ExitStack() as stack:
            out.append(measure(start_deployment(stack, settings, method, placement, say, engine, parallel)))
    return out


def report_of(measured: list[dict], encoded, run, command: str, config: dict, models: dict) -> dict:
    """The engine's report schema: a run per speculative deployment against the first (plain)."""
    from playground.measure.bench.machine import environment
    from playground.measure.bench.report import SCHEMA
    from playground.measure.bench.summary import by_category

    base, runs, curves = measured[0], [], {}
    for m in measured:
        curves[m["deployment"]["name"]] = m["concurrency"]
    for m in measured[1:]:
        records = [run_record(p, b, s, run.temperature == 0)
                   for (p, _), b, s in zip(encoded, base["timed"], m["timed"])]
        runs.append({"settings": settings_for(run, m["deployment"]["name"]), "summary": summarize(records),
                     "categories": by_category(records, summarize), "prompts": records, "skipped": []})
    plain_curve = curves.get(measured[0]["deployment"]["name"], [])
    return {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
            "config": config, "models": models, "environment": environment("cpu"), "runs": runs,
            "served": {"deployments": [m["deployment"] for m in measured],
                       "baseline_tok_s": [t["tokens"] / t["seconds"] for t in base["timed"]],
                       "concurrency": curves,
                       "crossover": {name: crossover(plain_curve, c) for name, c in curves.items()
                                     if name != measured[0]["deployment"]["name"] and c}}}


def format_curves(report: dict) -> str:
    curves = report["served"]["concurrency"]
    if not any(curves.values()):
        return ""
    lines = [f"{'deployment':<14} {'requests':>8} {'agg tok/s':>10} {'latency s':>10} {'max s':>8}"]
    for name, points in curves.items():
        for p in points:
            lines.append(f"{name:<14} {p['concurrency']:>8} {p['aggregate_tok_s']:>10.2f} "
                         f"{p['latency_s_median']:>10.2f} {p['latency_s_max']:>8.2f}")
    for name, n in report["served"]["crossover"].items():
        lines.append(f"{name}: " + (f"slower than plain from {n} concurrent requests" if n
                                    else "never slower than plain at these concurrencies"))
    return "\n".join(lines)


def parse_served(text: str) -> tuple[str, list[str]]:
    """--served: 'vllm' or 'llamacpp' (start servers here) or comma-separated URLs (the first is the
    baseline)."""
    from playground.measure.bench.served.client import check_url

    if text in ("vllm", "llamacpp", "llama.cpp"):
        return text.replace(".", ""), []
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise ValueError("expected 'vllm', 'llamacpp' or server URLs like http://127.0.0.1:8000[,http://...]")
    return "urls", [check_url(u) for u in urls]


def parse_levels(text: str | None, field: str = "--concurrency") -> list[int]:
    """Simultaneous request counts, e.g. '1,2,4,8'; ValueError naming `field` and the range."""
    if not text:
        return []
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or not all(1 <= n <= 256 for n in levels):
        raise ValueError(f"{field} must be comma-separated integers in [1, 256], got {text!r}")
    return levels


def served_main(parser, args, plan) -> int:
    """The benchmark's served flow; arguments were checked by the parser and make_plan."""
    import sys

    from playground.measure.bench.console import format_report
    from playground.measure.bench.report import write_json
    from playground.measure.bench.served.client import ServedError
    from playground.measure.bench.served.deploy import gguf_settings, local_settings, placement_for
    from playground.models.registry import load_registry
    from playground.models.text import encode_prompt

    try:
        engine, urls = parse_served(args.served)
    except (ValueError, ServedError) as error:
        parser.error(f"argument --served: {error}")
    try:
        levels = parse_levels(args.concurrency)
    except ValueError as error:
        parser.error(f"argument --concurrency: {error}")
    methods = [export.PLAIN] + [m for m in args.served_methods.split(",") if m and m != export.PLAIN]
    if not set(methods) <= set(METHODS):
        parser.error(f"argument --served-methods: expected some of draft_model, ngram, got {args.served_methods!r}")
    if len(plan.cells) > 1:
        parser.error("argument --served: a served run measures one setting; drop --sweep")
    say = lambda text: print(text, file=sys.stderr, flush=True)
    run, registry = plan.cells[0], getattr(args, "registry", None) or load_registry()
    tiny = registry.pair(run.pair).random_weights  # the tiny pair: saved once, float32
    try:
        settings = (gguf_settings if engine == "llamacpp" else local_settings)(registry, run)
        tokenizer = tokenizer_of(tiny, registry.model(registry.pair(run.pair).target))
        placement = placement_for(settings, tiny)
        encoded = [(p, ids) for p in plan.prompts
                   if len(ids := encode_prompt(tokenizer, p.text)) + run.max_new_tokens <= placement.max_model_len]
        if not encoded:
            raise ServedError(f"no prompt fits {placement.max_model_len} tokens with {run.max_new_tokens} new")
        measure = lambda dep: measure_deployment(dep, encoded, run, args.repeats, args.warmup, levels, say)
        measured = measured_deployments(engine, urls, settings, methods, placement, measure, say,
                                        max(levels, default=1))
    except (ServedError, RuntimeError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    llamacpp = engine == "llamacpp"
    models = {"pair": run.pair, "target": settings.target_ref.gguf if llamacpp else settings.target_ref.hf_id,
              "draft": settings.draft_ref.gguf if llamacpp else settings.draft_ref.hf_id,
              "dtype": "as in the GGUF files" if llamacpp else placement.dtype,
              "engine": {"vllm": "vllm", "llamacpp": "llama.cpp (llama-server)"}.get(engine, "served by URL"),
              # the tiny pair vLLM serves is built wider (checkpoints.SERVED_HIDDEN: its attention's head
              # sizes), so its tokens cannot be held to our tiny engine's
              "same_weights_as_ours": None if engine == "urls" else not (tiny and engine == "vllm")}
    config = {"served": args.served, "methods": methods, "concurrency": levels, "repeats": args.repeats,
              "prompt_count": len(encoded), "prompts": args.prompts, "categories": args.categories,
              "limit_per_category": args.limit}
    report = report_of(measured, encoded, run, plan.command, config, models)
    if report["runs"]:
        print(format_report(report))
    print(format_curves(report))
    if args.json is not None:
        write_json(report, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def tokenizer_of(tiny: bool, target_spec):
    """The tokenizer our engine encodes the prompts with: the tiny pair's, else the one in the target's
    checkpoint on this disk (a hub cache, a local folder, or a model pack's converted checkpoint: the
    llama.cpp settings name the hub id, which an offline machine cannot reach)."""
    if tiny:
        from playground.models.tiny import byte_tokenizer
        return byte_tokenizer()
    from transformers import AutoTokenizer

    from playground.measure.bench.served.checkpoints import cached_checkpoint

    return AutoTokenizer.from_pretrained(str(cached_checkpoint(target_spec)))
