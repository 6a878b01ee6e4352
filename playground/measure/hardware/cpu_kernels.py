"""Which CPU kernel keeps verification flat: the target's plain step and v(2..K) per kernel and runner.

    python -m playground.measure.hardware.cpu_kernels [--candidates int4-cpu,bf16,...] [--runners eager,...]
                                             [--pair NAME] [--model target|draft] [--max-k 8] [--repeats 3]
                                             [--load-library PATH.so] [--json out.json]

Issue 20 asks for a CPU path where a forward over 2-8 tokens costs little more than one, at a plain
step no slower than int4-cpu's. Each candidate is one way to hold the target's linear layers; each
runner one way to run its forward (engine/runners): `eager`, `compiled` (inductor's default code per
fixed shape) and `autotune` (the compiled runner under inductor's max-autotune with freezing, so the
weights are constants and its C++ GEMM templates, AMX tiles included, compete with the aten kernels).
v(k) is measured as everywhere else (verify_cost.measure_curve: k new tokens after a cached prefix).

Why it differs by kernel: at batch 1 a step reads every weight once, so it waits on memory and a few
more rows ride along for free, unless the kernel does arithmetic per row that costs more than the
read (dequantizing in registers for each block of rows, as PyTorch's int4/int8 pack kernels do for
blocks of 4): then each block costs about a step; da8w4 (int8 activations x int4 weights, integer
dot products) does far less arithmetic per row, so it stays flat to 4 rows. The `hybrid` row is
derived, not loaded: int4-cpu eager for a plain step, bf16 eager for k > 1 (both weight copies
resident).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass

from tqdm import tqdm

from playground.measure.hardware.common import command

RUNNERS = ("eager", "compiled", "autotune")


@dataclass(frozen=True)
class Candidate:
    name: str
    quantization: str  # as load_model takes it
    dtype: str
    torchao: str | None = None  # a torchao config applied after loading (bf16 weights)
    runners: tuple[str, ...] = RUNNERS
    about: str = ""


CANDIDATES = {c.name: c for c in (
    Candidate("int4-cpu", "int4-cpu", "bfloat16", about="today's: aten int4pack kernel, int8 head"),
    Candidate("int8-cpu", "int8-cpu", "bfloat16", about="aten int8pack kernel, per-row scales"),
    Candidate("bf16", "none", "bfloat16", about="dense bf16 weights: oneDNN (AMX bf16 tiles)"),
    Candidate("ao-int8", "none", "bfloat16", "int8", about="torchao Int8WeightOnlyConfig"),
    Candidate("ao-int4", "none", "bfloat16", "int4", about="torchao int4 weight-only, CPU (opaque) packing"),
    Candidate("ao-da8w4", "none", "bfloat16", "da8w4", ("eager", "compiled"),
              about="torchao int8 dynamic activations x int4 weights (da8w4_linear_cpu, AMX int8); "
                    "its kernel is not in the PyPI wheel: built from torchao's source, --load-library"),
)}
DEFAULT_CANDIDATES = tuple(CANDIDATES)


@dataclass
class Row:
    candidate: str
    runner: str
    step_ms: float  # median of a 1-token forward after the prefix
    v: list[float]  # v[k - 1] = cost(k) / cost(1)
    first_call_s: float  # load + transform + the untimed round (compiles, autotunes)
    note: str = ""


def apply_torchao(model, which: str) -> None:
    """Quantize the model's linear layers in place with a torchao config (weight-only, or da8w4)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    if which == "int8":
        config = Int8WeightOnlyConfig()  # per-row scales, the weight read as int8
    elif which == "int4":  # torchao's CPU int4 (Int4OpaqueTensor): the aten int4pack kernel int4-cpu calls
        from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

        config = PrototypeInt4WeightOnlyConfig(group_size=128, set_inductor_config=False)
    else:  # da8w4: each token's activations quantized to uint8, the int4 weights dequantized to int8 tiles
        from torchao.prototype.quantization.int4.inference_workflow import (
            Int8DynamicActivationInt4WeightConfig,
        )

        config = Int8DynamicActivationInt4WeightConfig(group_size=128, set_inductor_config=False)
    quantize_(model, config)


def load_as(candidate: Candidate, pair: str | None, role: str = "target"):
    """The pair's target (or draft) as this candidate holds it; the other model is not loaded."""
    from playground.models.loading import load_model
    from playground.models.registry import load_registry

    registry = load_registry()
    spec = registry.model(getattr(registry.pair(pair), role))
    loaded = load_model(spec, quantization=candidate.quantization, dtype=candidate.dtype, device="cpu")
    if candidate.torchao:
        apply_torchao(loaded.model, candidate.torchao)
    return loaded.model


def runner_context(runner: str):
    """autotune: inductor's max-autotune GEMM choice with the weights frozen into constants."""
    if runner != "autotune":
        return contextlib.nullcontext()
    import torch._inductor.config as inductor

    return inductor.patch(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN", freezing=True)


def fresh_steps(model) -> None:
    """Forget the model's compiled steps, so the next runner compiles its own under its settings."""
    from playground.engine.runners.static import state_of

    state_of(model).steps = None


def measure_runner(model, candidate: str, runner: str, max_k: int, repeats: int) -> Row:
    from playground.measure.bench.verify_cost import measure_curve

    fresh_steps(model)
    started = time.perf_counter()
    with runner_context(runner):
        curve = measure_curve(model, max_k=max_k, repeats=repeats, runner="eager" if runner == "eager"
                              else "compiled")
    elapsed = time.perf_counter() - started
    return Row(candidate, runner, curve.step_s * 1e3, list(curve.v), elapsed)


def hybrid_row(rows: list[Row]) -> Row | None:
    """int4-cpu eager for plain steps, bf16 eager for k > 1: v(k) = bf16 cost(k) / int4 cost(1)."""
    by = {(r.candidate, r.runner): r for r in rows}
    int4, bf16 = by.get(("int4-cpu", "eager")), by.get(("bf16", "eager"))
    if int4 is None or bf16 is None:
        return None
    ks = min(len(int4.v), len(bf16.v))
    v = [1.0] + [bf16.v[k] * bf16.step_ms / int4.step_ms for k in range(1, ks)]
    return Row("hybrid", "eager", int4.step_ms, v, 0.0, "derived: int4-cpu step, bf16 for k > 1")


def measure_all(candidates: list[Candidate], runners: list[str], pair: str | None, max_k: int,
                repeats: int, role: str = "target") -> list[Row]:
    """One model load per candidate; each runner measured on it in turn. A candidate that cannot
    load or run (torchao missing, a kernel that refuses the shapes) gives a row saying why."""
    rows: list[Row] = []
    plan = [(c, r) for c in candidates for r in runners if r in c.runners]
    with tqdm(total=len(plan), desc="cpu kernels", unit="run", file=sys.stderr) as bar:
        for candidate in candidates:
            mine = [r for r in runners if r in candidate.runners]
            if not mine:
                continue
            started = time.perf_counter()
            try:
                model = load_as(candidate, pair, role)
            except (ImportError, ValueError, RuntimeError, TypeError, AssertionError) as error:
                rows += [Row(candidate.name, r, float("nan"), [], 0.0, f"failed to load: {error}") for r in mine]
                bar.update(len(mine))
                continue
            load_s = time.perf_counter() - started
            for runner in mine:
                bar.set_postfix_str(f"{candidate.name} {runner}")
                try:
                    row = measure_runner(model, candidate.name, runner, max_k, repeats)
                    row.first_call_s += load_s
                    load_s = 0.0
                except Exception as error:  # noqa: BLE001  (an inductor or kernel failure is a result here)
                    row = Row(candidate.name, runner, float("nan"), [], 0.0,
                              f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
                rows.append(row)
                bar.update(1)
            del model
    hybrid = hybrid_row(rows)
    return rows + ([hybrid] if hybrid else [])


def format_table(rows: list[Row], max_k: int) -> str:
    ks = range(2, max_k + 1)
    head = ["candidate", "runner", "plain step"] + [f"v({k})" for k in ks] + ["first call", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        step = "–" if r.step_ms != r.step_ms else f"{r.step_ms:.1f} ms"
        vs = [f"{r.v[k - 1]:.3f}" if k <= len(r.v) else "–" for k in ks]
        first = f"{r.first_call_s:.0f} s" if r.first_call_s else "–"
        lines.append("| " + " | ".join([r.candidate, r.runner, step, *vs, first, r.note]) + " |")
    return "\n".join(lines)


def parse_list(text: str, allowed, flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{flag}: expected a comma-separated list of {', '.join(allowed)}, "
                                         f"got {text!r}")
    return names


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = command("cpu_kernels", __doc__)
    parser.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                        type=lambda s: parse_list(s, CANDIDATES, "--candidates"))
    parser.add_argument("--runners", default=",".join(RUNNERS), type=lambda s: parse_list(s, RUNNERS, "--runners"))
    parser.add_argument("--pair", default=None, help="a pair in models.yaml (default: the default pair)")
    parser.add_argument("--model", default="target", choices=("target", "draft"),
                        help="which model of the pair (the draft's plain step gives c)")
    parser.add_argument("--max-k", type=int, default=8, choices=range(2, 33), metavar="2..32")
    parser.add_argument("--repeats", type=int, default=3, choices=range(1, 51), metavar="1..50")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--load-library", default=None, metavar="PATH.so",
                        help="a kernel library to load first (torchao's CPU kernels built from its source)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    if args.load_library:
        import torch
        import torchao  # noqa: F401  (defines the torchao:: schemas the library implements)

        torch.ops.load_library(args.load_library)
    from playground.measure.bench.cli import quiet_transformers

    quiet_transformers()
    rows = measure_all([CANDIDATES[n] for n in args.candidates], args.runners, args.pair, args.max_k, args.repeats,
                       args.model)
    print(format_table(rows, args.max_k))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": " ".join(["python -m playground.measure.hardware.cpu_kernels", *(argv or sys.argv[1:])]),
                       "rows": [asdict(r) for r in rows]}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
