"""`python -m playground.measure.hardware.gpu_oracle`: what verification costs on a GPU, with no download.

Random models of real shapes (a Qwen2-7B-shaped target, a Qwen2-0.5B-shaped draft, bf16 on CUDA)
and an oracle drafter that proposes the target's own greedy continuation: every proposal is
accepted and each target call yields gamma + 1 tokens, so the speedup left is what verifying
gamma + 1 tokens in one forward (plus the engine's bookkeeping) buys over gamma + 1 one-token
steps: the ceiling for a perfect draft on this hardware. A random 0.5B-shaped draft (alpha ~ 0)
shows the other end: the cost c of drafting with nothing accepted. Random weights make the
text meaningless and often repetitive; the timing does not care.

    python -m playground.measure.hardware.gpu_oracle               # one H200: meant to finish within 8 minutes
    python -m playground.measure.hardware.gpu_oracle --cpu-smoke   # tiny shapes on CPU, seconds (tests)
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

from playground.measure.hardware.common import SHAPES, gpu_command, parse, random_model, require_cuda


@dataclass
class Row:
    """One line of the table."""

    method: str
    gamma: int | None
    new_tokens: int
    tok_s: float | None  # None when the row was skipped
    tokens_per_call: float | None = None
    speedup: float | None = None  # over our autoregressive baseline, timed alternately with it
    vs_hf_generate: float | None = None  # tok/s over transformers generate()
    verify_ms: float | None = None  # milliseconds per target call
    verify_cost: float | None = None  # one verification forward / one autoregressive step
    other_ms: float | None = None  # wall ms per target call outside target forwards: drafting + engine
    note: str = ""


SMOKE = {"gammas": "1,2,3", "draft_gammas": "2", "max_new_tokens": 12, "prompt_tokens": 16, "repeats": 1}
# 180 new tokens is a multiple of gamma + 1 for gamma = 1, 2, 4, 8: every oracle call, the last one
# included, yields gamma + 1 tokens.
FULL = {"gammas": "1,2,4,8", "draft_gammas": "4", "max_new_tokens": 180, "prompt_tokens": 128, "repeats": 3}


def options(argv=None) -> argparse.Namespace:
    p = gpu_command("gpu_oracle", __doc__)
    p.add_argument("--gammas", help="lookaheads for the oracle (default 1,2,4,8; smoke 1,2,3)")
    p.add_argument("--draft-gammas",
                   help="lookaheads for the random draft model, '' for none (default 4; smoke 2)")
    p.add_argument("--max-new-tokens", type=int, help="default 180 (smoke 12)")
    p.add_argument("--prompt-tokens", type=int, help="random prompt length (default 128; smoke 16)")
    p.add_argument("--repeats", type=int, help="timed runs per method, median reported (default 3; smoke 1)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the transformers generate() and assisted rows")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="start a row only if it is expected to end within this many seconds of the start "
                        "(default 420: with imports, under 8 minutes)")
    args = parse(p, argv, FULL, SMOKE)
    try:
        args.gammas = [int(g) for g in args.gammas.split(",") if g.strip()]
        args.draft_gammas = [int(g) for g in args.draft_gammas.split(",") if g.strip()]
    except ValueError:
        p.error("argument --gammas/--draft-gammas: expected comma-separated integers")
    if not args.gammas or min(args.gammas + args.draft_gammas) < 1:
        p.error("argument --gammas/--draft-gammas: expected integers >= 1")
    return args


def timed(methods: dict, repeats: int) -> dict:
    """The median run of each method, the methods alternated within each repeat."""
    from playground.measure.bench.runs import alternate, median_run

    return {name: median_run(runs) for name, runs in alternate(methods, repeats).items()}


def per_call_s(run) -> float:
    """Seconds of one target forward in this run: a verification, or one autoregressive step."""
    from playground.engine.events import steady_events

    steady = steady_events(run.events)  # the first call also reads the prompt
    return sum(e.verify_s for e in steady) / len(steady)


def other_ms(run) -> float:
    """Milliseconds per target call spent outside the target's forwards: for the
    oracle (whose proposals cost nothing) this is the engine's own overhead."""
    outside = run.seconds - sum(e.verify_s for e in run.events)
    return 1000 * outside / len(run.events)


def speculative_row(method: str, gamma: int, spec, ar, hf_tok_s, note: str = "") -> Row:
    from playground.engine.events import summarize

    return Row(method, gamma, len(spec.tokens), spec.tok_s, summarize(spec.events).mean_tokens_per_call,
               spec.tok_s / ar.tok_s, spec.tok_s / hf_tok_s if hf_tok_s else None, 1000 * per_call_s(spec),
               per_call_s(spec) / per_call_s(ar), other_ms(spec), note)


def baseline_rows(target, prompt, args) -> list[Row]:
    """Our AR baseline beside transformers generate(), alternated."""
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.runs import Run, engine_run
    from playground.measure.bench.references.transformers import hf_generate

    config = SpecConfig(max_new_tokens=args.max_new_tokens)
    methods = {"ar": lambda: engine_run(target, prompt, config, None, ())}
    if not args.no_reference:
        methods["hf"] = lambda: Run(*hf_generate(target, prompt, config, ()))
    runs = timed(methods, args.repeats)
    ar, hf = runs["ar"], runs.get("hf")
    rows = [Row("ours, autoregressive", None, len(ar.tokens), ar.tok_s, 1.0, 1.0,
                ar.tok_s / hf.tok_s if hf else None, 1000 * per_call_s(ar), 1.0, other_ms(ar))]
    if hf:
        rows.append(Row("transformers generate()", None, len(hf.tokens), hf.tok_s, vs_hf_generate=1.0))
    return rows


def oracle_row(target, prompt, recording, gamma: int, args, hf_tok_s) -> Row:
    """Our AR baseline and the oracle at this gamma, alternated: the speedup comes from the same repeats."""
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.runs import engine_run
    from playground.measure.hardware.oracle import OracleDrafter, converge_oracle

    sequence, rounds = converge_oracle(target, prompt, recording, gamma)
    config = SpecConfig(gamma=gamma, max_new_tokens=args.max_new_tokens)
    oracle = OracleDrafter(prompt + sequence)
    runs = timed({"ar": lambda: engine_run(target, prompt, config, None, ()),
                  "oracle": lambda: engine_run(target, prompt, config, oracle, ())}, args.repeats)
    note = f"recording converged in {rounds} rounds" if rounds > 1 else ""
    return speculative_row("oracle", gamma, runs["oracle"], runs["ar"], hf_tok_s, note)


def draft_rows(target, draft, prompt, gamma: int, args) -> list[Row]:
    """The random draft (alpha ~ 0): the price of c with nothing accepted, ours and transformers'."""
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.generate import SpecConfig
    from playground.engine.events import summarize
    from playground.measure.bench.runs import Run, engine_run
    from playground.measure.bench.references.transformers import hf_generate

    config = SpecConfig(gamma=gamma, max_new_tokens=args.max_new_tokens)
    methods = {"ar": lambda: engine_run(target, prompt, config, None, ()),
               "draft": lambda: engine_run(target, prompt, config, factory.model_drafter(RunConfig(), factory.Models(target, draft)), ())}
    if not args.no_reference:
        methods["hf"] = lambda: Run(*hf_generate(target, prompt, config, ()))
        methods["hf_assisted"] = lambda: Run(*hf_generate(target, prompt, config, (), assistant=draft))
    runs = timed(methods, args.repeats)
    m, hf = summarize(runs["draft"].events), runs.get("hf")
    rows = [speculative_row("random draft model", gamma, runs["draft"], runs["ar"], hf.tok_s if hf else None,
                            f"alpha={m.alpha:.2f} c={m.c:.3f}")]
    if hf:
        assisted = runs["hf_assisted"]
        rows.append(Row("transformers assisted", gamma, len(assisted.tokens), assisted.tok_s,
                        vs_hf_generate=assisted.tok_s / hf.tok_s, note="same random draft, constant gamma"))
    return rows


def all_rows(target, draft, prompt, args, start: float) -> list[Row]:
    """Every row in order. A row runs only if it is expected to end within the budget, else it is
    listed as skipped; expectations scale with the baseline rows' own duration on this machine."""
    from playground.measure.hardware.oracle import greedy_continuation

    def fits(expected_s: float) -> bool:
        return time.monotonic() - start + expected_s <= args.budget_s

    recording = greedy_continuation(target, prompt, args.max_new_tokens)
    began = time.monotonic()
    rows = baseline_rows(target, prompt, args)
    base_s = time.monotonic() - began  # repeats x (our AR + transformers generate)
    hf_tok_s = next((r.tok_s for r in rows if r.method.startswith("transformers")), None)
    for gamma in args.gammas:  # an oracle row: re-recording rounds + repeats x (AR + a faster oracle run)
        rows.append(oracle_row(target, prompt, recording, gamma, args, hf_tok_s) if fits(1.5 * base_s)
                    else Row("oracle", gamma, 0, None, note="skipped: time budget"))
    for gamma in args.draft_gammas:  # each draft run costs up to (1 + gamma c) AR runs, c <= ~1 at batch 1
        rows += (draft_rows(target, draft, prompt, gamma, args) if fits((1 + gamma) * base_s)
                 else [Row("random draft model", gamma, 0, None, note="skipped: time budget")])
    return rows


def warm_up(target, draft, prompt, args) -> None:
    """First calls pay for the CUDA context, cuBLAS handles and kernel selection: keep them out of
    the timings."""
    from playground.config import RunConfig
    from playground.engine import factory
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.runs import engine_run
    from playground.measure.hardware.oracle import OracleDrafter
    from playground.measure.bench.references.transformers import hf_generate

    config = SpecConfig(gamma=max(args.gammas), max_new_tokens=8)
    engine_run(target, prompt, config, None, ())
    engine_run(target, prompt, config, OracleDrafter(prompt), ())
    engine_run(target, prompt, config, factory.model_drafter(RunConfig(), factory.Models(target, draft)), ())
    if not args.no_reference:
        hf_generate(target, prompt, config, ())
        hf_generate(target, prompt, config, (), assistant=draft)


COLUMNS = (  # (header, Row field, format)
    ("method", "method", "{}"), ("γ", "gamma", "{}"), ("tok/s", "tok_s", "{:.1f}"),
    ("tokens/call", "tokens_per_call", "{:.2f}"), ("speedup vs our AR", "speedup", "{:.2f}x"),
    ("vs HF generate", "vs_hf_generate", "{:.2f}x"), ("verify ms/call", "verify_ms", "{:.1f}"),
    ("verify / AR step", "verify_cost", "{:.2f}"), ("other ms/call", "other_ms", "{:.2f}"),
    ("note", "note", "{}"),
)


def format_table(rows: list[Row], facts: dict) -> str:
    """A markdown table, headed by what it was measured on, ready to paste into docs/benchmarks.md."""
    f = facts
    title = (f"# {f['device_name']} · {f['dtype']} · target {f['target']} · draft {f['draft']} · "
             f"{f['prompt_tokens']} prompt + {f['max_new_tokens']} new tokens · median of {f['repeats']} · "
             f"torch {f['torch']} · transformers {f['transformers']} · {f['date']}")
    lines = [title, "| " + " | ".join(h for h, _, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [("-" if getattr(row, k) is None else fmt.format(getattr(row, k))) for _, k, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args) -> tuple[list[Row], dict]:
    """Build the models, record the oracle, time every row. Returns the rows and machine facts."""
    import torch

    from playground.measure.bench.machine import environment

    start = time.monotonic()
    require_cuda("gpu_oracle", args)
    device, dtype = ("cpu", torch.float32) if args.cpu_smoke else ("cuda", torch.bfloat16)
    shapes = ("tiny", "tiny-draft") if args.cpu_smoke else ("7b", "0.5b")
    target = random_model(shapes[0], dtype, device, args.seed)
    draft = random_model(shapes[1], dtype, device, args.seed + 1)
    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(SHAPES[shapes[0]]["vocab_size"], (args.prompt_tokens,), generator=gen).tolist()
    warm_up(target, draft, prompt, args)
    rows = all_rows(target, draft, prompt, args, start)
    env = environment(device)
    facts = {"device_name": env["device_name"], "dtype": str(dtype).replace("torch.", ""),
             "target": shapes[0], "draft": shapes[1], "prompt_tokens": args.prompt_tokens,
             "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "torch": env["torch"],
             "transformers": env["transformers"], "date": time.strftime("%Y-%m-%d"),
             "seconds": round(time.monotonic() - start, 1), "environment": env}
    if device == "cuda":
        facts["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
    return rows, facts


def main(argv=None) -> int:
    args = options(argv)
    from playground.measure.bench.cli import quiet_transformers

    quiet_transformers()
    rows, facts = run(args)
    print(format_table(rows, facts))
    print(f"# {facts['seconds']} s in all")
    if args.json:
        from playground.measure.bench.report import atomic_write

        report = {"facts": facts, "rows": [asdict(r) for r in rows]}
        atomic_write(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
