"""What the hardware commands share: a command line named after its module (with the full run's and
the CPU smoke run's presets), random Qwen2 models of real shapes and the early-exit pair built from
them, random prompts, one report row pooled from timed records, and the loop that runs a command's
checks, writing each result as soon as it ends.

Nothing here imports torch at module level, so `--help` stays light.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import traceback

# ---- the command line --------------------------------------------------------------------------


def command(name: str, doc: str) -> argparse.ArgumentParser:
    """A parser for `python -m playground.measure.hardware.<name>`, described by its docstring's first
    line (less a leading "`python -m ...`: ", which the usage line already shows)."""
    first = doc.strip().splitlines()[0]
    return argparse.ArgumentParser(prog=f"python -m playground.measure.hardware.{name}",
                                   description=re.sub(r"^`[^`]*`:\s*", "", first))


def gpu_command(name: str, doc: str) -> argparse.ArgumentParser:
    """A GPU command's parser: --cpu-smoke (the same code on tiny CPU models, for the tests), --seed, --json."""
    p = command(name, doc)
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny float32 models on the CPU: checks the script, not the GPU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the results here (rewritten as each part ends)")
    return p


def parse(p: argparse.ArgumentParser, argv, full: dict, smoke: dict) -> argparse.Namespace:
    """Parse argv; every preset setting the user did not give (left None) comes from the full run's
    presets, or the smoke run's under --cpu-smoke."""
    args = p.parse_args(argv)
    for name, value in (smoke if args.cpu_smoke else full).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args


def require_cuda(prog: str, args) -> None:
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit(f"{prog}: no CUDA device; use --cpu-smoke to check the script on CPU")


# ---- models and prompts ------------------------------------------------------------------------

SHAPES = {
    # Qwen2-7B: 28 layers, hidden 3584, 28 query / 4 key-value heads, vocab 152064.
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # Qwen2.5-1.5B (the default pair's target): 28 layers, hidden 1536, 12 / 2 heads, tied embeddings.
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    # Qwen2-0.5B: 24 layers, hidden 896, 14 / 2 heads. Its real vocab is 151936; here it takes the
    # 7B's so both models share one token space (the rows are random either way).
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=152064, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, tie_word_embeddings=False),
    "tiny-draft": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, vocab_size=512, tie_word_embeddings=False),
}
CURVE_KS = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65)  # the k a report shows of a v(k) curve


def default_dtype(dtype):
    import torch

    from playground.engine.generate import held

    return held(torch.get_default_dtype, torch.set_default_dtype, dtype)


def random_model(shape: str, dtype, device, seed: int):
    """A randomly initialised Qwen2 of the given shape, built directly on the device in `dtype`
    (a 7B model in float32 on the CPU first would take minutes and 30 GB)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, eos_token_id=None, bos_token_id=None,
                         pad_token_id=None)
    rng_devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=rng_devices), default_dtype(dtype), torch.device(device):
        torch.manual_seed(seed)  # init draws from the global RNG: seed it inside a fork, restored after
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = None  # no EOS: every method generates exactly max_new_tokens
    return model.eval()


def pair_models(shape: str, dtype, device, args):
    """A random target whose embeddings are scaled (so its next-token distributions are peaked, as a
    trained model's are; args.embed_std) and an early-exit draft: its first args.draft_layers layers
    with the same embeddings and head, so the two agree as a real pair does."""
    import copy

    import torch
    from transformers import Qwen2ForCausalLM

    target = random_model(shape, dtype, device, args.seed)
    with torch.no_grad(), torch.random.fork_rng(devices=[torch.device(device)] if device == "cuda" else []):
        torch.manual_seed(args.seed + 7)
        torch.nn.init.normal_(target.model.embed_tokens.weight, std=args.embed_std)
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = args.draft_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:args.draft_layers]
    with default_dtype(dtype), torch.device(device):
        draft = Qwen2ForCausalLM(config)
    draft.load_state_dict(target.state_dict(), strict=False)  # layers past draft_layers are not in it
    draft.generation_config.eos_token_id = None
    return target, draft.eval()


def prompts(vocab: int, args) -> list[list[int]]:
    """args.prompts random prompts of args.prompt_tokens token ids, the same for a given args.seed."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    return [torch.randint(vocab, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.prompts)]


def save_for_loader(model, folder) -> None:
    """A random model saved where the app's loader reads it: its weights, and a tokenizer beside them."""
    from playground.models.tiny import byte_tokenizer

    model.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)


def free() -> None:
    """Give the memory of models the caller has just deleted back to the device."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- the report --------------------------------------------------------------------------------


def pooled_row(records: list[dict], v: list[float], label: str, tree: bool = True) -> dict:
    """One row of the report from the prompts' records and the target's v(k) curve: speeds, and α,
    c and v through the engine's one pooling, the prediction through its one formula."""
    from playground.engine.events import pooled
    from playground.engine.sampling import expected_speedup, verify_cost
    from playground.measure.bench.summary import record_tally, tree_tally

    def total(key):
        return sum(r[key] for r in records)

    base_s, spec_s = total("baseline_seconds"), total("speculative_seconds")
    chain = pooled(record_tally(r) for r in records)
    gamma = total("drafted") / total("target_calls")
    row = {
        "label": label, "alpha": chain.alpha, "mean_gamma": gamma, "c": chain.c,
        "v_chain": verify_cost(v, gamma + 1), "verify_chain": chain.verify_cost,
        "baseline_tok_s": total("baseline_new_tokens") / base_s,
        "chain_tok_s": total("new_tokens") / spec_s,
        "chain_speedup": (total("new_tokens") / spec_s) / (total("baseline_new_tokens") / base_s),
        "chain_tokens_per_call": total("new_tokens") / total("target_calls"),
        "predicted_chain_speedup": expected_speedup(chain.alpha, gamma, chain.c, v),
        "chain_identical": [r["identical"] for r in records],
        "divergence_margins": [r["divergence_margin"] for r in records if r["identical"] is False],
        "step_ms": 1000 * chain.plain_step_s, "v": {k: round(v[k - 1], 3) for k in CURVE_KS if k <= len(v)},
    }
    if tree:
        tree_s = total("tree_seconds")
        nodes = total("tree_nodes") / total("tree_cost_calls")
        row.update({
            "tree_tok_s": total("tree_new_tokens") / tree_s,
            "tree_speedup": (total("tree_new_tokens") / tree_s) / row["baseline_tok_s"],
            "tree_over_chain": (total("tree_new_tokens") / tree_s) / row["chain_tok_s"],
            "tree_tokens_per_call": total("tree_new_tokens") / total("tree_target_calls"),
            "tree_nodes_per_call": nodes,
            "tree_v": verify_cost(v, min(nodes + 1, len(v))),
            "tree_c_per_depth": pooled(tree_tally(r) for r in records).c,
            "tree_identical": [r["tree_identical"] for r in records],
        })
    return row


def run_checks(prog: str, checks, args, skip=None) -> int:
    """Run the checks that args.checks names, in order, each printed and written to args.json as
    soon as it ends; one that fails is reported with its traceback and the next still runs.
    `skip(name)`: why a check is not started (a command's budget spent), or None to run it; the
    reason is its result.  -> the exit status: 1 if any check failed"""
    import torch

    from playground.measure.bench.cli import quiet_transformers
    from playground.measure.bench.machine import environment
    from playground.measure.bench.report import atomic_write

    quiet_transformers()
    require_cuda(prog, args)
    report = {"environment": environment(args.device), "args": {k: v for k, v in vars(args).items()
                                                               if isinstance(v, (int, float, str, tuple))},
              "date": time.strftime("%Y-%m-%d")}
    failed = 0
    for name, check in checks:
        if name not in args.checks.split(","):
            continue
        started = time.monotonic()
        try:
            report[name] = (skip and skip(name)) or check(args)
        except Exception as e:  # report it and go on: one broken path must not hide the others
            failed += 1
            report[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        report[name + "_seconds"] = round(time.monotonic() - started, 1)
        if torch.cuda.is_available():  # the peak so far: a check's models are let go before the next
            report[name + "_peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        print(f"## {name} ({report[name + '_seconds']} s)\n{json.dumps(report[name], indent=1, default=str)}",
              flush=True)
        if args.json:
            atomic_write(args.json, json.dumps(report, indent=2, default=str) + "\n")
    if torch.cuda.is_available():
        print(f"# peak CUDA memory {torch.cuda.max_memory_allocated() / 1e9:.1f} GB")
    return 1 if failed else 0
