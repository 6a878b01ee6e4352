"""`python -m playground.measure.hardware.apart`: each engine's run in a process of its own: speed and memory.

The benchmark times every engine in one process: there our "plain" memory includes the draft loaded
for the speculative run, and a peer's loop runs after our libraries are loaded, which flatters it (its
growth is measured on top of ours). Here each engine runs in a fresh child process that loads only
what it needs, reads the prompt once untimed (a warm-up), then decodes it timed:

- `ours`, `ours-spec`: our engine as the race runs it (the pair loaded as the app loads it, the
  runner auto chose, the warm-up's builds and choices read from the cache), plain or speculative at the
  pair's γ;
- `genai`, `genai-spec`: onnxruntime-genai's own loop (measure/bench/references/onnxruntime_genai.own_loop)
  on the same builds and threads, plain or with the draft's build at the same γ (its whole head:
  it refuses a draft whose logits are narrower than the target's), in a process that imports
  onnxruntime_genai and nothing of ours;
- `draft-cut`, `draft-full`: the draft's plain step on onnxruntime with its head cut to the pair's
  draft vocabulary, or whole, timed as auto times it (runners/timing.py), each build alone in its
  process (auto times the two side by side, beside the target's session: issue 48 asked whether that
  is why the cut measured slower).

Each child reports its resident memory at each stage (after its imports, after loading, after the run;
and its peak, the kernel's VmHWM) and its decode rate (tokens after the first over the time after it)
and prefill (time to the first token). Engines alternate over `--rounds`, a child each, so a drift of
the machine hits every engine; the medians are reported, with the ratios ours over theirs.

    python -m playground.measure.hardware.apart [--pair NAME] [--engines ours,ours-spec,genai,genai-spec]
                                               [--prompt-tokens 256] [--new-tokens 128] [--rounds 3] [--json F]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playground.measure.hardware.common import command

ENGINES = ("ours", "ours-spec", "genai", "genai-spec", "draft-cut", "draft-full")
STAGES = ("imported", "loaded", "ran", "peak")  # resident MB after each stage, and the peak


def options(argv=None):
    p = command("apart", __doc__)
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the registry's default)")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"which engines, in order ({', '.join(ENGINES)})")
    p.add_argument("--prompt-tokens", type=int, default=256, help="the prompt's length in tokens (about)")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens each run decodes at most")
    p.add_argument("--rounds", type=int, default=3, help="times the engines alternate, a process each")
    p.add_argument("--gamma", type=int, default=None, help="the speculative runs' γ (default: the pair's)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse_hidden())
    p.add_argument("--job", help=argparse_hidden())
    args = p.parse_args(argv)
    args.engines = tuple(e for e in args.engines.split(",") if e)
    if not args.engines or any(e not in ENGINES for e in args.engines):
        p.error(f"argument --engines: expected a comma-separated list of {', '.join(ENGINES)}")
    for name in ("prompt_tokens", "new_tokens", "rounds"):
        if getattr(args, name) < (2 if name == "new_tokens" else 1):
            p.error(f"argument --{name.replace('_', '-')}: too small: {getattr(args, name)}")
    return args


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


def main(argv=None) -> int:
    args = options(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child](json.loads(Path(args.job).read_text()))))
        return 0
    job = prepare(args)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(json.dumps(job))
    runs: dict[str, list[dict]] = {engine: [] for engine in args.engines}
    for round_ in range(args.rounds):
        for engine in args.engines if round_ % 2 == 0 else reversed(args.engines):
            runs[engine].append(child(engine, f.name))
            print(f"round {round_ + 1} {engine}: {runs[engine][-1]}", file=sys.stderr, flush=True)
    Path(f.name).unlink()
    report = {"job": {k: v for k, v in job.items() if k != "ids"}, "prompt_tokens": len(job["ids"]),
              "runs": runs, "medians": medians(runs)}
    print(table(report))
    if args.json:
        from playground.measure.bench.report import atomic_write

        atomic_write(args.json, json.dumps(report, indent=2) + "\n")
    return 0


def child(engine: str, job: str) -> dict:
    """One engine's run in a fresh process: what it printed, read back."""
    out = subprocess.run([sys.executable, "-m", "playground.measure.hardware.apart", "--child", engine,
                          "--job", job], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"apart: the {engine} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the parent: the pair's builds made (or found) once, the prompt, the job ------------------------


def prepare(args) -> dict:
    """What every child needs, found by the parent: the builds' folders (the warm-up makes them and
    records auto's choices, as the app does), the prompt's ids, γ, threads and end tokens. Then the
    parent lets its own models go: the children run on the machine with nothing of it computing."""
    import gc

    import torch

    from playground.engine.runners import resolve
    from playground.engine.runners.onnx_build import built_model
    from playground.engine.runners.warmup import chosen_head, warm_up
    from playground.measure.bench.cli import quiet_transformers
    from playground.measure.hardware.step_profile import prompt_ids
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    quiet_transformers()
    registry = load_registry()
    name = args.pair or registry.default_pair
    run = pair_run(registry, name, args.new_tokens, args.gamma)
    pair = PairCache(registry).get(name, **run.loading())
    list(warm_up(pair.target.model, pair.draft.model, run, head=True))
    cut_rows = run.draft_vocab
    run = chosen_head(pair.draft.model, run)
    runners = {role: resolve(run.runner, m.device, False, m, rows) for role, m, rows in
               (("target", pair.target.model, None), ("draft", pair.draft.model, run.draft_vocab or None))}
    if set(runners.values()) != {"onnxruntime"}:
        raise SystemExit(f"apart: auto runs this pair on {runners}; the comparison is with onnxruntime-genai "
                         "on the same builds, so both models must run on onnxruntime")
    job = {"pair": name, "gamma": run.gamma, "draft_vocab": run.draft_vocab, "threads": torch.get_num_threads(),
           "new_tokens": args.new_tokens, "eos": list(pair.eos), "cut_rows": cut_rows,
           "ids": prompt_ids(pair.tokenizer, args.prompt_tokens),
           "target_folder": str(built_model(pair.target.model).folder),
           # onnxruntime-genai drafts with the whole head: it refuses a draft whose logits are narrower
           "draft_folder": str(built_model(pair.draft.model).folder)}
    del pair
    gc.collect()
    return job


def pair_run(registry, name: str, new_tokens: int, gamma: int | None = None):
    """The run the race makes of the pair: its models.yaml settings (γ as given, else the pair's),
    greedy, `new_tokens` at most."""
    from playground.config import RunConfig

    knobs = registry.pair(name).suggested()
    return RunConfig(pair=name, **{**knobs, **({"gamma": gamma} if gamma else {}), "max_new_tokens": new_tokens,
                                    "temperature": 0.0})


# -- the children ------------------------------------------------------------------------------------


def resident_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def peak_mb() -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ours(job: dict, speculative: bool) -> dict:
    """Our engine as the race runs it, in this process alone."""
    memory = {}
    from playground.engine import factory
    from playground.measure.bench import runs
    from playground.measure.bench.cli import quiet_transformers
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    quiet_transformers()
    memory["imported"] = resident_mb()
    registry = load_registry()
    from dataclasses import replace

    run = replace(pair_run(registry, job["pair"], job["new_tokens"], job["gamma"]), draft_vocab=job["draft_vocab"])
    pair = PairCache(registry).get(job["pair"], **{**run.loading(), "with_draft": speculative})
    config = factory.spec_config(run)
    target = pair.target.model

    def drafter():
        return factory.make_drafter(run, factory.Models(target, pair.draft.model)) if speculative else None

    runs.engine_run(target, job["ids"], replace(config, max_new_tokens=4), drafter(), job["eos"])  # warm
    memory["loaded"] = resident_mb()
    result = runs.engine_run(target, job["ids"], config, drafter(), job["eos"])
    memory["ran"], memory["peak"] = resident_mb(), peak_mb()
    return fields(result.tokens, result.seconds, result.first_seconds, result.first_tokens, memory)


def genai(job: dict, speculative: bool) -> dict:
    """onnxruntime-genai's own loop, in a process that imports nothing of ours but this loop."""
    memory = {}
    from playground.measure.bench.references.onnxruntime_genai import own_loop, own_model

    import onnxruntime_genai  # noqa: F401  (its import counted with the imports)

    memory["imported"] = resident_mb()
    model = own_model(Path(job["target_folder"]), Path(job["draft_folder"]) if speculative else None,
                      job["gamma"] if speculative else None, job["threads"])
    own_loop(model, job["ids"], 4, job["eos"], time.perf_counter, speculative)  # warm
    memory["loaded"] = resident_mb()
    tokens, seconds, first, _ = own_loop(model, job["ids"], job["new_tokens"], job["eos"], time.perf_counter,
                                         speculative)
    memory["ran"], memory["peak"] = resident_mb(), peak_mb()
    return fields(tokens, seconds, first, 1, memory)


def draft_step(job: dict, cut: bool) -> dict:
    """The draft's plain step on onnxruntime, its head cut or whole, alone in this process."""
    from playground.engine.runners.timing import time_steps
    from playground.measure.bench.cli import quiet_transformers
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    quiet_transformers()
    memory = {"imported": resident_mb()}
    registry = load_registry()
    run = pair_run(registry, job["pair"], job["new_tokens"], job["gamma"])
    draft = PairCache(registry).get(job["pair"], **run.loading()).draft.model
    rows = job["cut_rows"] if cut else None
    timed = time_steps(draft, {"step": ("onnxruntime", rows)})
    memory["loaded"] = memory["ran"] = resident_mb()
    memory["peak"] = peak_mb()
    return {"step_ms": timed.step_ms["step"], "rows": rows, **{f"{k}_mb": round(v, 1) for k, v in memory.items()}}


def fields(tokens, seconds: float, first: float, first_tokens: int, memory: dict) -> dict:
    decoded = len(tokens) - first_tokens
    return {"tokens": list(tokens), "seconds": seconds, "prefill_s": first,
            "tok_s": len(tokens) / seconds, "decode_tok_s": decoded / (seconds - first) if decoded else None,
            **{f"{stage}_mb": round(mb, 1) for stage, mb in memory.items()}}


CHILDREN = {"ours": lambda job: ours(job, False), "ours-spec": lambda job: ours(job, True),
            "genai": lambda job: genai(job, False), "genai-spec": lambda job: genai(job, True),
            "draft-cut": lambda job: draft_step(job, True), "draft-full": lambda job: draft_step(job, False)}


# -- the report ---------------------------------------------------------------------------------------


def medians(runs: dict[str, list[dict]]) -> dict:
    keys = ("tok_s", "decode_tok_s", "prefill_s", "step_ms", *(f"{s}_mb" for s in STAGES))
    out = {engine: {k: statistics.median(r[k] for r in rs) for k in keys if all(r.get(k) is not None for r in rs)}
           for engine, rs in runs.items() if rs}
    for mine, theirs in (("ours", "genai"), ("ours-spec", "genai-spec")):
        if mine in out and theirs in out:
            out[f"{mine} over {theirs}"] = {
                "decode": out[mine]["decode_tok_s"] / out[theirs]["decode_tok_s"],
                "with prefill": out[mine]["tok_s"] / out[theirs]["tok_s"],
                "prefill time": out[mine]["prefill_s"] / out[theirs]["prefill_s"],
                "peak memory": out[mine]["peak_mb"] / out[theirs]["peak_mb"],
                "resident after the run": out[mine]["ran_mb"] / out[theirs]["ran_mb"]}
    if "draft-cut" in out and "draft-full" in out:
        out["draft-cut over draft-full"] = {"step": out["draft-cut"]["step_ms"] / out["draft-full"]["step_ms"]}
    for engine, rs in runs.items():
        if engine in out and "tokens" in rs[0]:
            out[engine]["same_tokens_every_round"] = all(r["tokens"] == rs[0]["tokens"] for r in rs)
    return out


def table(report: dict) -> str:
    m = report["medians"]
    lines = [f"# each engine in a process of its own: {report['job']['pair']}, a {report['prompt_tokens']}-token "
             f"prompt, {report['job']['new_tokens']} new tokens at most, γ {report['job']['gamma']}, "
             f"{report['job']['threads']} threads; medians of {len(next(iter(report['runs'].values())))} rounds",
             "| engine | tok/s | decode tok/s | prefill s | step ms | imported MB | loaded MB | after run MB | peak MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for engine in report["runs"]:
        r = m.get(engine, {})
        lines.append(f"| {engine} | " + " | ".join(f"{r[k]:.2f}" if k in r else "–" for k in
                     ("tok_s", "decode_tok_s", "prefill_s", "step_ms", "imported_mb", "loaded_mb", "ran_mb", "peak_mb"))
                     + " |")
    for key, ratios in m.items():
        if " over " in key:
            lines.append(f"{key}: " + ", ".join(f"{k} {v:.3f}×" for k, v in ratios.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
