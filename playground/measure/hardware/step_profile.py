"""`python -m playground.measure.hardware.step_profile`: where a decoded token's ms go, ours and ORT GenAI's.

Our plain loop on the onnxruntime runner and onnxruntime-genai's own loop, on the same build.

    python -m playground.measure.hardware.step_profile [--pair NAME] [--prompt-tokens 512] [--new-tokens 128]
                                              [--repeats 5] [--runner auto|onnxruntime] [--ort-profile]
                                              [--json out.json]

Issue 38: our plain decoding on the onnxruntime runner measured 0.91-0.98x onnxruntime-genai's own loop
on the same build (decode tok/s). Both loops run greedy on the same prompt and token budget through the
benchmark's own timed functions (runs.engine_run for ours, runs.ortgenai_run and so
references/onnxruntime_genai.decode for theirs), alternated `--repeats` times so a drift hits both, with
perf_counter spans around the functions each calls (step_spans.py; in place for the profiled run only,
the engine itself unchanged). Only decoding counts: the step that reads the prompt, and theirs
append_tokens with the first generate_next_token that picks from it, are the prefill, left out as the
benchmark's decode tok/s leaves them out. Each row is the time inside its function less the rows
inside it, summed over the repeats and divided by the decoded tokens, so the rows add up to the total;
the last row of each side is what no span covers (the loop around the calls).

`--ort-profile` adds one more run of each with ONNX Runtime's profiler on (SessionOptions.enable_profiling
for ours, the same session option in theirs' genai_config): its `model_run` time per decoding run, which
splits theirs generate_next_token into ONNX Runtime's run and the rest. The profiler records every node,
so that run is slower; its figures stand apart from the timed ones.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from playground.measure.hardware.common import command

CALLS = {"ort_run": "run_with_iobinding", "generate_next_token": "generate_next_token"}  # what holds the run
QUESTION = "Write pytest unit tests for the module above: one test per function, each with a docstring."


def options(argv=None):
    p = command("step_profile", __doc__)
    p.add_argument("--pair", default=None, help="a pair from models.yaml (default: the registry's default)")
    p.add_argument("--prompt-tokens", type=int, default=512, help="the prompt's length in tokens (about)")
    p.add_argument("--new-tokens", type=int, default=128, help="tokens each loop decodes")
    p.add_argument("--repeats", type=int, default=5, help="times ours and theirs alternate")
    p.add_argument("--runner", choices=("auto", "onnxruntime"), default="auto",
                   help="the target's runner, as the race names it (it must resolve to onnxruntime)")
    p.add_argument("--ort-profile", action="store_true",
                   help="one more run of each with ONNX Runtime's profiler on: its own time per run")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    for name in ("prompt_tokens", "new_tokens", "repeats"):
        if getattr(args, name) < (2 if name == "new_tokens" else 1):
            p.error(f"argument --{name.replace('_', '-')}: too small: {getattr(args, name)}")
    return args


def main(argv=None) -> int:
    args = options(argv)
    from playground.measure.bench.cli import quiet_transformers

    quiet_transformers()
    setup, config, ids = prepare(args)
    warm_up(setup, config, ids)
    timed = alternated(setup, config, ids, args.repeats)
    report = summarize(args, config, ids, timed)
    if args.ort_profile:
        report["ort_profile"] = ort_profiled(setup, config, ids)
    print(format_table(report))
    if args.json:
        import json

        from playground.measure.bench.report import atomic_write

        atomic_write(args.json, json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


# -- the pair, the prompt, the runs ----------------------------------------------------------------


def prepare(args):
    """The pair loaded as the app loads it (PairCache, no draft), the run's SpecConfig, the prompt.
    Refuses a target whose runner is not onnxruntime: the comparison is two loops on one build."""
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.runners import resolve
    from playground.measure.bench import runs
    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    run = RunConfig(max_new_tokens=args.new_tokens, temperature=0.0, runner=args.runner)
    pair = PairCache(load_registry()).get(args.pair, **{**run.loading(), "with_draft": False})
    target = pair.target.model
    kind = resolve(run.runner, target.device, False, target)
    if kind != "onnxruntime":
        raise SystemExit(f"step_profile: runner {args.runner} runs this pair's target on {kind}; the profile "
                         "compares ONNX Runtime and ORT GenAI on one build: give --runner onnxruntime")
    from playground.measure.bench.references.onnxruntime_genai import check_installed

    check_installed()
    setup = runs.Setup(target, None, run, pair.eos)
    return setup, factory.spec_config(run), prompt_ids(pair.tokenizer, args.prompt_tokens)


def prompt_ids(tokenizer, n: int) -> list[int]:
    """A chat prompt of about n tokens: enough of the engine's own source, then a question a model
    answers at length (greedy decoding of a real pair should not stop early). Shorter than the
    template allows: the question alone."""
    from playground.engine import generate
    from playground.models.text import encode_prompt

    source = tokenizer(Path(generate.__file__).read_text() * 8, add_special_tokens=False)["input_ids"]
    take = n - len(encode_prompt(tokenizer, QUESTION))
    ids = encode_prompt(tokenizer, QUESTION)
    for _ in range(4):  # the decoded source may tokenize a token or two longer inside the template
        if take <= 0:
            break
        ids = encode_prompt(tokenizer, tokenizer.decode(source[:take]) + "\n\n" + QUESTION)
        if len(ids) <= n:
            break
        take -= len(ids) - n
    return ids


def ours(setup, config, ids):
    """One profiled run of our plain loop: (Run, Spans)."""
    from playground.measure.bench import runs
    from playground.measure.hardware.step_spans import Spans, ours_patched

    with ours_patched(Spans()) as spans:
        run = runs.engine_run(setup.target, ids, config, None, setup.eos)
    return run, spans


def theirs(setup, config, ids):
    """One profiled run of onnxruntime-genai's own loop on the target's build: (Run, Spans)."""
    from playground.measure.bench import runs
    from playground.measure.hardware.step_spans import Spans, theirs_patched

    with theirs_patched(Spans()) as spans:
        run = runs.ortgenai_run(setup, ids, config)
    return run, spans


def warm_up(setup, config, ids) -> None:
    """One untimed run of each at full length: the build's session, its arena, theirs Model."""
    ours(setup, config, ids)
    theirs(setup, config, ids)


def alternated(setup, config, ids, repeats: int) -> dict[str, list]:
    """Ours and theirs, `repeats` times each, the order rotated every repeat (the benchmark's alternate)."""
    from playground.measure.bench.runs import alternate

    return alternate({"ours": lambda: ours(setup, config, ids), "theirs": lambda: theirs(setup, config, ids)},
                     repeats)


# -- pooling -------------------------------------------------------------------------------------


def side(profiled: list, rows: dict[str, str]) -> dict:
    """One loop's rows in ms per decoded token, pooled over its runs (so they add up), the rest in
    `loop`; the total per token of each run beside them, and each row's calls per token."""
    tokens = sum(run.decode_tokens for run, _ in profiled)
    if any(run.decode_tokens == 0 for run, _ in profiled):
        raise SystemExit("step_profile: a run ended at its first token (an end token): nothing decoded to "
                         "profile; try another --prompt-tokens")
    wall = sum(run.decode_seconds for run, _ in profiled)
    named = [name for name in rows if name != "loop"]
    seconds = {name: sum(spans.seconds.get(name, 0.0) for _, spans in profiled) for name in named}
    calls = {name: sum(spans.calls.get(name, 0) for _, spans in profiled) / tokens for name in seconds}
    seconds["loop"] = wall - sum(seconds.values())  # what no span covers
    return {
        "ms_per_token": {name: 1000 * s / tokens for name, s in seconds.items()},
        "calls_per_token": calls,
        "total_ms": 1000 * wall / tokens,
        "per_run_total_ms": [1000 * run.decode_seconds / run.decode_tokens for run, _ in profiled],
        "decode_tokens": tokens,
    }


def summarize(args, config, ids, timed: dict[str, list]) -> dict:
    import torch

    from playground.measure.bench.machine import environment
    from playground.measure.hardware.step_spans import OURS, THEIRS

    mine, other = side(timed["ours"], OURS), side(timed["theirs"], THEIRS)
    ratios = [a / b for a, b in zip(mine["per_run_total_ms"], other["per_run_total_ms"])]
    return {
        "config": {"pair": args.pair or "default", "runner": config.runner, "prompt_tokens": len(ids),
                   "new_tokens": config.max_new_tokens, "repeats": args.repeats,
                   "threads": torch.get_num_threads()},
        "environment": environment("cpu"),
        "rows": {"ours": OURS, "theirs": THEIRS},
        "ours": mine, "theirs": other,
        "ours_over_theirs_time": mine["total_ms"] / other["total_ms"],  # > 1: ours slower per token
        "ours_over_theirs_time_per_repeat": ratios,
        "identical_tokens": all(a.tokens == b.tokens
                                for (a, _), (b, _) in zip(timed["ours"], timed["theirs"])),
    }


def ort_profiled(setup, config, ids) -> dict:
    """One more run of each, after one to warm its fresh session, with ONNX Runtime's profiler on:
    ONNX Runtime's own time per decoding run (the profile's last runs, one per decoded token) beside
    the spans of that same run, so the call that holds the run splits into the run and the rest."""
    from playground.measure.hardware.step_spans import (OURS, THEIRS, ours_profiled, session_runs,
                                                        theirs_profiled)

    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, profiled, loop, rows, call in (
                ("ours", ours_profiled(setup.target, Path(folder)), ours, OURS, "ort_run"),
                ("theirs", theirs_profiled(Path(folder)), theirs, THEIRS, "generate_next_token")):
            with profiled as written:
                loop(setup, config, ids)
                run, spans = loop(setup, config, ids)
                per_run = session_runs(written())[-run.decode_tokens:]
            pooled = side([(run, spans)], rows)
            found[name] = {"model_run_ms": 1000 * statistics.fmean(per_run), "runs": len(per_run),
                           "call": CALLS[call], "call_ms": pooled["ms_per_token"][call],
                           "total_ms": pooled["total_ms"]}
    return found


# -- the table -----------------------------------------------------------------------------------


def format_table(report: dict) -> str:
    c = report["config"]
    lines = [f"Per decoded token, ms: pair {c['pair']}, runner {c['runner']}, prompt {c['prompt_tokens']} "
             f"tokens, {c['new_tokens']} new, {c['repeats']} repeats alternating, {c['threads']} threads"]
    for name, title in (("ours", "ours: the engine's plain loop"),
                        ("theirs", "theirs: onnxruntime-genai's own loop")):
        lines += side_lines(report[name], report["rows"][name], title)
    ratio, each = report["ours_over_theirs_time"], report["ours_over_theirs_time_per_repeat"]
    lines.append(f"ours / theirs, time per token: {ratio:.3f}x (decode tok/s {1 / ratio:.3f}x theirs); "
                 f"per repeat {min(each):.3f}-{max(each):.3f}x; same tokens: {report['identical_tokens']}")
    if "ort_profile" in report:
        lines += profile_lines(report)
    return "\n".join(lines)


def side_lines(found: dict, rows: dict[str, str], title: str) -> list[str]:
    total, spread = found["total_ms"], found["per_run_total_ms"]
    lines = [f"{title:<74} {'ms/token':>9} {'share':>6} {'calls':>5}"]
    for name, what in rows.items():
        if name not in found["ms_per_token"] or (name != "loop" and not found["calls_per_token"].get(name)):
            continue
        ms, calls = found["ms_per_token"][name], found["calls_per_token"].get(name)
        lines.append(f"  {what:<72} {ms:9.3f} {ms / total:6.1%} {'' if calls is None else f'{calls:5.2f}'}")
    label = f"total ({found['decode_tokens']} tokens; runs {min(spread):.3f}-{max(spread):.3f})"
    lines.append(f"  {label:<72} {total:9.3f}")
    return lines


def profile_lines(report: dict) -> list[str]:
    lines = ["ONNX Runtime's profiler, one more run of each (it records every node: slower than timed runs):"]
    for name, rest in (("ours", "the binding's handover"), ("theirs", "its search and next inputs")):
        p = report["ort_profile"][name]
        run, call, total = p["model_run_ms"], p["call_ms"], p["total_ms"]
        lines.append(f"  {name + ':':<7} model_run {run:.3f} ms a run ({p['runs']} runs); {p['call']} "
                     f"{call:.3f} ({call - run:+.3f}: {rest}); total {total:.3f} "
                     f"({total - run:.3f} outside ONNX Runtime's run)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
