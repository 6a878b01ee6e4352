"""`python -m playground.bench --peers`: every peer a user could run instead, on the same prompts, in one
command, in one table: our engine plain and speculative (the runner, drafter and γ given), llama.cpp's
own loop, ONNX Runtime GenAI's and OpenVINO GenAI's own loops plain and speculative (timed beside ours,
prompt by prompt), then llama.cpp's server and vLLM, plain and speculative (each server started,
measured and stopped alone, as `--served` does).

It is a preset of the one benchmark, not a second one: each part is `python -m playground.bench` itself
with the same prompt and setting flags, its report kept whole in the JSON. A peer that is not installed
is left out with the command that installs it. tok/s include the prefill; decode-only rates beside.
Greedy identity is against our plain run: token ids for the loops timed beside ours, the text for the
servers (llama.cpp's stream carries no ids). The servers run after our part, minutes later, so their
absolute rates carry the machine's drift: their speedups are over their own plain deployment, timed
in the same part.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path


def add_flag(group) -> None:
    """--peers, in the CLI's served-engines group."""
    group.add_argument("--peers", action="store_true",
                       help="every peer installed here on the same prompts, in one table: ours plain and "
                            "speculative with llama.cpp's, ONNX Runtime GenAI's and OpenVINO GenAI's loops "
                            "beside, then llama.cpp's server and vLLM plain and speculative (greedy)")


def check(args) -> None:
    """--peers sets its own --reference and --served runs, for one greedy setting."""
    from playground.measure.bench.sweep import SettingError

    if not getattr(args, "peers", False):
        return
    if args.reference or args.served or args.drafters is not None or args.sweep:
        raise SettingError("--peers", "it chooses its own --reference and --served runs, one setting: drop "
                                      "--reference, --served, --drafters and --sweep")
    if (args.temperature or 0) != 0:
        raise SettingError("--peers", "the peers are timed greedy: add --temperature 0")


# each loop timed beside ours: its module, and how to get it
LOOPS = {"llama.cpp": ("llama_cpp", "python -m playground.serve setup llamacpp"),
         "onnxruntime-genai": ("onnxruntime_genai", "pip install onnxruntime-genai"),
         "openvino": ("openvino_genai", "python -m playground.serve setup openvino")}


def parts() -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The benchmark runs to make, and one line per peer left out (with how to install it)."""
    from playground.measure.bench.served.launch import llama_server_binary
    from playground.serve.vllm_venv import is_ready

    here = [name for name, (module, _) in LOOPS.items() if importlib.util.find_spec(module) is not None]
    missing = [f"{name}: not installed ({how})" for name, (module, how) in LOOPS.items() if name not in here]
    runs = [("ours", ["--reference", ",".join(here)] if here else [])]
    if llama_server_binary() is not None:
        runs.append(("llama-server", ["--served", "llamacpp", "--served-methods", "draft_model,ngram"]))
    else:
        missing.append("llama-server: not built (python -m playground.serve setup llama-server)")
    if is_ready():
        runs.append(("vllm", ["--served", "vllm", "--served-methods", "draft_model,ngram"]))
    else:
        missing.append("vLLM: no venv (python -m playground.serve setup vllm)")
    return runs, missing


def decode_rate(records: list[dict], run: str) -> float | None:
    """Tokens after the first / seconds after the first token, pooled over prompts (served records;
    run: 'baseline' or 'speculative')."""
    tokens_key, first_key = ("baseline_new_tokens", "baseline_first_token_s") if run == "baseline" else \
        ("new_tokens", "first_token_s")
    tokens = sum(r[tokens_key] - 1 for r in records)
    seconds = sum(r[f"{run}_seconds"] - (r.get(first_key) or 0.0) for r in records)
    return tokens / seconds if seconds > 0 else None


def same_text(records: list[dict], ours: dict, key: str) -> str:
    """'k/n': prompts whose greedy text equals our plain run's ('—' where a report has no text)."""
    pairs = [(r.get(key), ours.get(r["id"])) for r in records]
    if any(a is None or b is None for a, b in pairs):
        return "—"
    return f"{sum(a == b for a, b in pairs)}/{len(pairs)}"


def local_rows(report: dict) -> list[dict]:
    """Our engine and the loops timed beside it, from the first run of the local report."""
    run = report["runs"][0]
    s, n = run["summary"], run["summary"]["prompts"]
    setting = run["settings"]
    rows = [{"engine": f"ours plain (runner {run.get('runner', setting['runner'])})", "tok_s": s["baseline_tok_s"],
             "decode_tok_s": s.get("baseline_decode_tok_s"), "acceptance": None, "identical": "reference",
             "weights_mb": s.get("baseline_weights_mb"), "resident_mb": s.get("baseline_resident_mb")},
            {"engine": f"ours speculative ({setting['drafter']}, γ {setting['gamma']})", "tok_s": s["speculative_tok_s"],
             "decode_tok_s": s.get("speculative_decode_tok_s"), "acceptance": s.get("alpha"),
             "identical": f"{s.get('identical_prompts', 0)}/{n}", "weights_mb": s.get("speculative_weights_mb"),
             "resident_mb": s.get("speculative_resident_mb")}]
    names = {"llamacpp": "llama.cpp's own loop, plain", "ortgenai": "ONNX Runtime GenAI's loop, plain",
             "ortgenai_speculative": "ONNX Runtime GenAI's loop, speculative",
             "openvino": "OpenVINO GenAI, plain", "openvino_speculative": "OpenVINO GenAI, speculative"}
    for key, engine in names.items():
        if f"{key}_tok_s" in s:
            rows.append({"engine": engine, "tok_s": s[f"{key}_tok_s"], "decode_tok_s": s.get(f"{key}_decode_tok_s"),
                         "acceptance": s.get(f"{key}_acceptance"),
                         "identical": f"{s.get(f'{key}_identical_prompts', 0)}/{n}",
                         "weights_mb": None, "resident_mb": s.get(f"{key}_resident_mb")})
    return rows


def served_rows(name: str, report: dict, ours: dict) -> list[dict]:
    """A server's plain deployment and each speculative one."""
    # other weights (vLLM's wider tiny pair): nothing to hold its text to
    other = report.get("models", {}).get("same_weights_as_ours") is False
    identical = lambda records, key: "other weights" if other else same_text(records, ours, key)
    held = [d.get("resident_mb") for d in report.get("served", {}).get("deployments", [])]
    held_by = lambda i: held[i] if i < len(held) else None
    rows = []
    for i, run in enumerate(report["runs"]):
        records, s = run["prompts"], run["summary"]
        if i == 0:
            rows.append({"engine": f"{name}, plain", "tok_s": s["baseline_tok_s"],
                         "decode_tok_s": decode_rate(records, "baseline"),
                         "acceptance": None, "identical": identical(records, "baseline_text"),
                         "weights_mb": None, "resident_mb": held_by(0)})
        rows.append({"engine": f"{name}, {run['settings']['deployment']}", "tok_s": s["speculative_tok_s"],
                     "decode_tok_s": decode_rate(records, "speculative"), "acceptance": s.get("alpha"),
                     "identical": identical(records, "text"), "weights_mb": None, "resident_mb": held_by(i + 1),
                     "speedup_over_own_plain": s.get("speedup")})
    return rows


def peer_rows(reports: dict) -> list[dict]:
    """Every row, fastest first, each with its rate over our plain run's."""
    local = reports.get("ours")
    ours_text = {r["id"]: r.get("baseline_text") for r in local["runs"][0]["prompts"]} if local else {}
    rows = local_rows(local) if local else []
    for name, label in (("llama-server", "llama.cpp's server"), ("vllm", "vLLM")):
        if name in reports:
            rows += served_rows(label, reports[name], ours_text)
    plain = rows[0]["tok_s"] if local else None
    for row in rows:
        row["over_ours_plain"] = row["tok_s"] / plain if plain else None
    return sorted(rows, key=lambda r: -r["tok_s"])


MEMORY_NOTE = ("resident MB (measured, psutil): ours, what our process's resident memory grew by since before its "
               "first model loaded, read at the end of each run (one process holds both our runs, so the plain "
               "row's figure includes the draft; the loops' growth is taken out); a loop, what its first call "
               "added to the process (its model loaded); a server, its processes' proportional set size after "
               "its run. weights MB (counted): ours only, the weights each run holds, in torch and in its "
               "runner, with the drafter's (engine/memory.py).")


def format_peers(rows: list[dict], missing: list[str]) -> str:
    """The peer table as Markdown (it goes into docs/benchmarks.md as printed)."""
    fmt = lambda v, spec: "—" if v is None else format(v, spec)
    lines = ["| engine | tok/s | decode tok/s | × ours plain | acceptance | greedy = ours plain | "
             "resident MB (measured) | weights MB (counted) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['tok_s']:.2f} | {fmt(r['decode_tok_s'], '.2f')} | "
                     f"{fmt(r['over_ours_plain'], '.2f')}× | {fmt(r['acceptance'], '.2f')} | {r['identical']} | "
                     f"{fmt(r['resident_mb'], '.0f')} | {fmt(r['weights_mb'], '.0f')} |")
    lines += ["", MEMORY_NOTE] + [f"left out: {line}" for line in missing]
    return "\n".join(lines)


def split_json(argv: list[str]) -> tuple[list[str], str | None]:
    """argv without --peers and --json PATH, and that path."""
    out, path, it = [], None, iter(argv)
    for arg in it:
        if arg == "--peers":
            continue
        if arg == "--json":
            path = next(it, None)
        elif arg.startswith("--json="):
            path = arg.split("=", 1)[1]
        else:
            out.append(arg)
    return out, path


def peers_main(argv: list[str], run_bench) -> int:
    """Each part through `run_bench(argv) -> exit code` (cli.main), then the table."""
    from playground.measure.bench.report import SCHEMA, write_json

    base, json_path = split_json(argv)
    if not any(a == "--temperature" or a.startswith("--temperature=") for a in base):
        base += ["--temperature", "0"]  # greedy, so every peer's tokens can be held to ours
    runs, missing = parts()
    reports = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in runs:
            out = Path(tmp) / f"{name}.json"
            print(f"peers: {name}: python -m playground.bench {' '.join(base + extra)}", file=sys.stderr, flush=True)
            if run_bench(base + extra + ["--json", str(out)]) != 0 or not out.is_file():
                missing.append(f"{name}: its run failed (above)")
                continue
            reports[name] = json.loads(out.read_text())
    if "ours" not in reports:
        print("peers: our own run failed; no table", file=sys.stderr)
        return 1
    document = {"schema": SCHEMA, "command": "python -m playground.bench " + " ".join(argv), "left_out": missing,
                "reports": reports}
    try:
        document["rows"] = rows = peer_rows(reports)
    finally:  # the parts are written whatever the table does: minutes of measurement are kept
        if json_path:
            write_json(document, json_path)
            print(f"wrote {json_path}", file=sys.stderr)
    print("Peers: the same prompts, one command; greedy = ours plain compares token ids (loops) or text (servers)")
    print(format_peers(rows, missing))
    return 0
