"""Command line for the model registry.

    python -m playground.models list                 # pairs and models in models.yaml
    python -m playground.models fetch [PAIR]         # download + convert a pair once, print footprints
    python -m playground.models generate [PAIR] -p "Write a haiku about caches."
    python -m playground.models cache list|verify|clear [NAME]   # sizes, re-hash every byte, free space
    python -m playground.models scan [--models-dir DIR]... [--json FILE]   # the models already on this machine
    python -m playground.models pair TARGET DRAFT --name NAME   # keep two of them as a pair (user-pairs.yaml)

`fetch` is what to run on a fresh machine before going offline: afterwards the pair loads from
the cache (PLAYGROUND_CACHE, default ~/.cache/speculative-playground) with no network at all.
"""

from __future__ import annotations

import argparse
import sys

from playground.models.registry import QUANTIZATIONS, Registry, load_registry


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.run in (run_cache, run_scan):  # neither needs models.yaml (and both work when it is broken)
            return args.run(None, args)
        registry = load_registry(args.config)
        return args.run(registry, args)
    except (ValueError, RuntimeError) as e:  # configuration and download problems: the message is the help
        print(f"error: {e}", file=sys.stderr)
        return 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground.models", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="models.yaml to read (default: $PLAYGROUND_CONFIG or the repository's)")
    sub = p.add_subparsers(required=True, metavar="command")
    sub.add_parser("list", help="list pairs and models").set_defaults(run=list_pairs)
    fetch = sub.add_parser("fetch", help="download and convert a pair's models, then load them once")
    fetch.add_argument("pair", nargs="?", help="pair name (default: the registry's default pair)")
    fetch.set_defaults(run=fetch_pair)
    gen = sub.add_parser("generate", help="load a pair and generate with speculative decoding")
    gen.add_argument("pair", nargs="?", help="pair name (default: the registry's default pair)")
    gen.add_argument("-p", "--prompt", default="Write a Python function that reverses a string.")
    gen.add_argument("-n", "--max-new-tokens", type=int, default=64)
    gen.set_defaults(run=generate_text)
    cache = sub.add_parser("cache", help="list, verify (re-hash) or clear the downloaded and converted models")
    cache.add_argument("action", choices=("list", "verify", "clear"))
    cache.add_argument("name", nargs="?", help="one entry (as `cache list` names it); default: all")
    cache.set_defaults(run=run_cache)
    scan = sub.add_parser("scan", help="find the models already on this machine (Hugging Face cache, Ollama, "
                                       "LM Studio, llama.cpp, --models-dir) and say which load here")
    scan.add_argument("--json", help="also write the table as JSON, one object per model")
    scan.set_defaults(run=run_scan)
    pair = sub.add_parser("pair", help="keep two scanned models as a pair (in user-pairs.yaml beside the cache)")
    pair.add_argument("target", help="the target's name as `scan` shows it")
    pair.add_argument("draft", help="the draft's name as `scan` shows it")
    pair.add_argument("--name", required=True, help="the pair's name (not one of models.yaml's)")
    pair.add_argument("--description", help="one line shown with the pair (default: its models and class)")
    pair.add_argument("--quantization", choices=QUANTIZATIONS,
                      help="both models' (default: auto; a model published in float32: none)")
    pair.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"),
                      help="both models' (default: auto; a model published in float32: float32)")
    pair.set_defaults(run=run_pair)
    for command in (scan, pair):
        command.add_argument("--models-dir", action="append", metavar="DIR",
                             help="a folder of models to scan too (GGUF files, checkpoint folders); repeatable")
    for command in (fetch, gen):
        command.add_argument("--target-quantization", choices=QUANTIZATIONS)
        command.add_argument("--draft-quantization", choices=QUANTIZATIONS)
        command.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"))
        command.add_argument("--device", choices=("auto", "cpu", "cuda"))
    return p


def list_pairs(registry: Registry, args) -> int:
    print(f"pairs in {registry.path}:")
    for name, pair in registry.pairs.items():
        labels = (("default", name == registry.default_pair), ("needs hub", pair.needs_hub),
                  ("random weights", pair.random_weights), ("yours: user-pairs.yaml", pair.kept))
        flags = ", ".join(label for label, on in labels if on)
        knobs = ", ".join(f"{knob} {value}" for knob, value in pair.suggested().items())
        print(f"  {name:<14} {pair.target} <- {pair.draft}  ({knobs}){f'  [{flags}]' if flags else ''}")
        print(f"  {'':<14} {pair.description}")
    print("models:")
    for name, model in registry.models.items():
        sources = ", ".join(str(s) for s in model.sources)
        print(f"  {name:<30} {model.quantization:<5} {sources}")
    return 0


def run_cache(registry, args) -> int:
    from playground.models import cachetool
    from playground.config import cache_dir

    root = cache_dir()
    if args.action == "list":
        return cachetool.cache_list(root, sys.stdout)
    if args.action == "verify":
        return cachetool.cache_verify(root, args.name, sys.stdout)
    return cachetool.cache_clear(root, args.name, sys.stdout)


def run_scan(registry, args) -> int:
    from playground.models.scan.cli import run_scan as scan

    return scan(args)


def run_pair(registry: Registry, args) -> int:
    from playground.models.scan.cli import run_pair as pair

    return pair(registry, args)


def say(message: str, fraction: float | None) -> None:
    """Stage changes on the console; tqdm bars show progress within a stage."""
    if fraction is None or fraction >= 1.0:
        print(f"  {message}", file=sys.stderr, flush=True)


def load_chosen(registry: Registry, args):
    from playground.models.pair_cache import PairCache

    return PairCache(registry).get(args.pair, target_quantization=args.target_quantization,
                                   draft_quantization=args.draft_quantization, dtype=args.dtype,
                                   device=args.device, progress=say)


def fetch_pair(registry: Registry, args) -> int:
    pair = load_chosen(registry, args)
    for role, m in (("target", pair.target), ("draft", pair.draft)):
        print(f"{role:<6} {m.name}: {m.footprint_bytes / 2**20:,.0f} MiB ({m.dtype}, quantization "
              f"{m.quantization}, {m.device}) from {m.source}")
    print(f"pair {pair.name!r} is ready" + (" (random weights)" if pair.random_weights else ""))
    return 0


def generate_text(registry: Registry, args) -> int:
    from playground.engine import factory
    from playground.config import RunConfig
    from playground.engine.generate import generate
    from playground.engine.events import output_tokens, summarize
    from playground.models.text import encode_prompt

    pair = load_chosen(registry, args)
    ids = encode_prompt(pair.tokenizer, args.prompt)
    run = RunConfig(pair=pair.spec.name, max_new_tokens=args.max_new_tokens, **pair.spec.suggested())
    events = list(generate(pair.target.model, ids, factory.spec_config(run), factory.make_drafter(run, factory.Models.of(pair)),
                           eos_token_ids=pair.eos))
    print(pair.tokenizer.decode(output_tokens(events), skip_special_tokens=True))
    m = summarize(events)
    print(f"\nalpha={m.alpha:.2f} tokens per target call={m.mean_tokens_per_call:.2f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
