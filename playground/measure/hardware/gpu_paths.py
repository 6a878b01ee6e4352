"""`python -m playground.measure.hardware.gpu_paths`: the app's CUDA paths on one GPU, with no download.

Random weights of real shapes, three checks, each written to the JSON as soon as it ends (one
that fails is reported and the next still runs):

1. v(k) on CUDA: one forward over k = 1..65 new tokens after a 200-token prefix, in plain steps,
   for bf16 models of Qwen2-7B, Qwen2.5-1.5B and Qwen2-0.5B shape: how many drafted tokens (a
   chain's or a tree's) one verification carries for the price of one step.
2. The engine with both models on the GPU: a Qwen2.5-1.5B-shaped target and an early-exit draft
   (its first layers, embeddings and head, so the two agree as a real pair does). Autoregressive,
   chain and tree timed alternately with synchronised clocks, α, c and v beside the speedups and
   the formula's prediction; greedy output compared with autoregressive token for token (float32:
   must be equal; bf16: equal or a reported near-tie).
3. bitsandbytes on CUDA: the same target saved, then loaded through the app's loader with nf4
   and int8; v(k), autoregressive and chain timed, greedy output compared with the quantized
   target's own (speculation is lossless relative to the target it verifies with).

    python -m playground.measure.hardware.gpu_paths --json out/gpu_paths.json   # one H200: about 4 minutes
    python -m playground.measure.hardware.gpu_paths --cpu-smoke                  # tiny shapes on the CPU (tests)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

from playground.measure.hardware.common import (CURVE_KS, free, gpu_command, pair_models, parse, pooled_row,
                                                prompts, random_model, run_checks, save_for_loader)

FULL = dict(curve_shapes=("7b", "1.5b", "0.5b"), pair_shape="1.5b", max_k=65, draft_layers=4, prompts=3,
            prompt_tokens=128, max_new_tokens=96, repeats=3, device="cuda", quantizations=("nf4", "int8"))
SMOKE = dict(curve_shapes=("tiny",), pair_shape="tiny", max_k=9, draft_layers=1, prompts=1,
             prompt_tokens=16, max_new_tokens=12, repeats=1, device="cpu", quantizations=("nf4",))


def options(argv=None) -> argparse.Namespace:
    p = gpu_command("gpu_paths", __doc__)
    p.add_argument("--gamma", type=int, default=4, help="chain lookahead (default 4)")
    p.add_argument("--tree", default="24,6,2,4",
                   help="tree budget,depth,branching,width (default 24,6,2,4: the CPU benchmark's)")
    p.add_argument("--embed-std", type=float, default=0.3,
                   help="std of the random embeddings: larger makes the early-exit draft agree more")
    p.add_argument("--checks", default="curves,engine,bitsandbytes", help="which checks to run, in order")
    p.add_argument("--prompts", type=int, help="random prompts per timing (default 3; smoke 1)")
    p.add_argument("--repeats", type=int, help="timed runs per method and prompt (default 3; smoke 1)")
    args = parse(p, argv, FULL, SMOKE)
    try:
        args.tree_budget, args.tree_depth, args.tree_branching, args.tree_width = map(int, args.tree.split(","))
    except ValueError:
        p.error(f"argument --tree: expected four integers budget,depth,branching,width, got {args.tree!r}")
    return args


# ---- the checks --------------------------------------------------------------------------------


def curves(args) -> dict:
    """v(k) of bf16 models of real shapes, k = 1..max_k."""
    import torch

    from playground.measure.bench.verify_cost import measure_curve

    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    out = {}
    for shape in args.curve_shapes:
        model = random_model(shape, dtype, args.device, args.seed)
        curve = measure_curve(model, max_k=args.max_k)
        out[shape] = {"step_ms": 1000 * curve.step_s,
                      "v": {k: round(curve.v[k - 1], 3) for k in CURVE_KS if k <= args.max_k},
                      "v_all": [round(x, 3) for x in curve.v]}
        del model
        free()
    return out


def engine_rows(target, draft, args, label: str, tree: bool = True) -> dict:
    """AR, chain (and tree) on every prompt, alternated; pooled speed, α, c, v, identity."""
    from playground.config import RunConfig
    from playground.engine.generate import SpecConfig
    from playground.measure.bench.runs import Setup, measure_prompt
    from playground.measure.bench.verify_cost import measure_curve

    run = RunConfig(gamma=args.gamma, tree_budget=args.tree_budget, tree_depth=args.tree_depth,
                    tree_branching=args.tree_branching, tree_width=args.tree_width)
    setup = Setup(target, draft, run, eos=(), tree=tree)
    config = SpecConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    ids_list = prompts(target.config.vocab_size, args)
    measure_prompt(setup, ids_list[0], replace(config, max_new_tokens=16), 1)  # warm-up: kernels, allocator
    records = [measure_prompt(setup, ids, config, args.repeats) for ids in ids_list]
    curve = measure_curve(target, max_k=max(args.gamma + 1, args.tree_budget + 1))
    return pooled_row(records, curve.v, label, tree)


def engine_on_gpu(args) -> dict:
    """Both models on the device: bf16 timing, then float32 identity."""
    import torch

    out = {}
    for dtype in ((torch.float32,) if args.cpu_smoke else (torch.bfloat16, torch.float32)):
        target, draft = pair_models(args.pair_shape, dtype, args.device, args)
        out[str(dtype).replace("torch.", "")] = engine_rows(target, draft, args, f"{args.pair_shape} {dtype}")
        del target, draft
        free()
    return out


def bitsandbytes_on_gpu(args) -> dict:
    """The app's loader (from_pretrained with BitsAndBytesConfig, device_map on the device) on a
    saved random target; speculation with the bf16 early-exit draft, greedy."""
    import torch

    from playground.models.loading import load_model
    from playground.models.registry import ModelSpec, Source

    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    name = "float32" if args.cpu_smoke else "bfloat16"
    target, draft = pair_models(args.pair_shape, dtype, args.device, args)
    out = {}
    with tempfile.TemporaryDirectory(prefix="gpu-paths-") as tmp:
        save_for_loader(target, tmp)
        del target
        free()
        spec = ModelSpec("random-target", (Source("local", tmp),))
        for quantization in args.quantizations:
            started = time.monotonic()
            loaded = load_model(spec, quantization=quantization, dtype=name, device=args.device)
            load_s = time.monotonic() - started
            row = engine_rows(loaded.model, draft, args, f"{args.pair_shape} {quantization}", tree=False)
            row.update(load_s=load_s, footprint_gb=loaded.footprint_bytes / 1e9,
                       linear=type(loaded.model.model.layers[0].mlp.down_proj).__name__)
            out[quantization] = row
            del loaded
            free()
    return out


CHECKS = (("curves", curves), ("engine", engine_on_gpu), ("bitsandbytes", bitsandbytes_on_gpu))


def main(argv=None) -> int:
    return run_checks("gpu_paths", CHECKS, options(argv))


if __name__ == "__main__":
    raise SystemExit(main())
