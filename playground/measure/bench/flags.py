"""The benchmark's command line: its flags (one per knob of the run configuration, with the knob's
own range and help), the pair's suggestions for the knobs not given, and the flags as the sweep's base
run. cli.py checks the flags together, plans and runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playground.config import KNOBS, MODEL_QUANTIZATIONS, KnobError, RunConfig, check_value, group, parse_text
from playground.measure.bench import peers
from playground.measure.bench.board import cli as board_cli
from playground.measure.bench.prompts import DEFAULT_PROMPTS
from playground.measure.bench.sweep import SWEEPABLE, SettingError

OUTPUTS = ("json", "csv", "html", "png")


def int_in(low: int, high: int):
    """An argparse type: an integer in [low, high], or an error that says the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}], "
                                             f"got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {value}")
        return value
    return parse


def output_path(text: str) -> Path:
    """An argparse type: a file path whose folder exists (checked before hours of measuring)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; expected a file path")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(path.parent)!r} does not exist")
    return path


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_knob_flags(parser, names) -> None:
    """One flag per knob of the run configuration, with its default, range and help from there.
    A knob the pair suggests (γ, temperature, draft vocabulary) defaults to the pair's value."""
    for name in names:
        k = KNOBS[name]
        default = None if k.pair_default else k.default
        shown = "the pair's" if k.pair_default else repr(k.default)
        if k.kind is bool:
            parser.add_argument(k.flag, action="store_true", help=f"{k.help}")
        elif k.choices:
            parser.add_argument(k.flag, choices=k.choices, default=default, help=f"{k.help} (default {shown})")
        else:
            parser.add_argument(k.flag, type=knob_type(k), default=default, metavar=k.name.upper(),
                                help=f"{k.help} (default {shown})")


def knob_type(k):
    """An argparse type: the knob's own parse and range check, so the message names the allowed values."""
    def parse(text: str):
        try:
            value = parse_text(k, text)
            check_value(k, value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value
    parse.__name__ = k.name
    return parse


def build_parser() -> argparse.ArgumentParser:
    from playground.models.registry import DEVICES, DTYPES  # plain config module: no torch

    p = argparse.ArgumentParser(prog="python -m playground.bench",
                                epilog="Method and tables: docs/benchmarks.md",
                                description="Time speculative decoding against autoregressive decoding "
                                            "of the same target, prompt by prompt.")
    data = p.add_argument_group("prompts")
    data.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="Spec-Bench question.jsonl or JSONL of "
                      "{id, category, prompt} (default: the bundled Spec-Bench questions)")
    data.add_argument("--categories", type=comma_list,
                      help="comma-separated categories to keep (default: all)")
    data.add_argument("--limit", type=int_in(1, 10**6),
                      help="at most N prompts per category (a balanced subset)")
    models = p.add_argument_group("models")
    models.add_argument("--pair", help="pair name from models.yaml, or one kept from the scan of your models "
                                       "(user-pairs.yaml; default: the registry's default pair)")
    models.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                        help="a folder of models to scan beside the usual stores, where a kept pair's model that is "
                             "gone from its path is looked for by its digest; repeatable")
    add_knob_flags(models, ("drafter", "ngram_min", "ngram_max", "draft_vocab", "target_quantization",
                            "draft_quantization", "runner"))
    models.add_argument("--target-quantizations", type=comma_list, metavar="Q1,Q2,...",
                        help="faster than what? time each of these target quantizations plainly and with "
                             "speculation, on the same prompts, and print one table against the fastest "
                             f"plain run (any of: {', '.join(MODEL_QUANTIZATIONS)}); writes --json only")
    models.add_argument("--dtype", choices=DTYPES, help="default: models.yaml's")
    models.add_argument("--device", choices=DEVICES, help="default: models.yaml's")
    knobs = p.add_argument_group("decoding")
    add_knob_flags(knobs, [k.name for k in group("decoding")])
    knobs.add_argument("--sweep", nargs="+", metavar="KEY=V1,V2",
                       help=f"grid over {', '.join(SWEEPABLE)}, e.g. gamma=1,2,4,8 temperature=0,0.7 "
                            "(ranges like gamma=1-8; drafter=tree is the draft model's tree, gamma levels deep)")
    tree = p.add_argument_group("token tree (--speculation tree drafts trees instead of chains; --tree adds "
                                "a tree as a third method beside the chain)")
    tree.add_argument("--tree", action="store_true",
                      help="also time tree speculation (SpecInfer verification, one target forward per tree) "
                           "beside the chain and autoregressive decoding, alternated with them")
    add_knob_flags(tree, ("speculation", "tree_budget", "tree_depth", "tree_branching", "tree_width"))
    timing = p.add_argument_group("timing")
    timing.add_argument("--repeats", type=int_in(1, 1000), default=3,
                        help="timed runs per prompt and method; the median is reported (default 3)")
    timing.add_argument("--warmup", type=int_in(0, 100), default=1,
                        help="untimed warm-up rounds per setting (default 1)")
    timing.add_argument("--reference", type=references, metavar="|".join(REFERENCES) + "[,...]",
                        help="other engines timed beside ours, comma-separated. transformers: its generate() and "
                             "assisted generation, same models and settings; llama.cpp: llama.cpp's own plain "
                             "decoding of the target's GGUF file (needs llama-cpp-python, an optional extra); "
                             "onnxruntime-genai: its own loop, plain and speculative (its draft at gamma), on "
                             "the onnxruntime runner's builds of the same checkpoints (greedy); openvino: OpenVINO "
                             "GenAI's LLMPipeline on the models' GGUF files (written once as its IR in the cache), "
                             "plain and speculative (greedy; python -m playground.serve setup openvino)")
    served = p.add_argument_group("served engines (docs/benchmarks.md, 'Served engines')")
    served.add_argument("--served", metavar="vllm|llamacpp|URL[,URL]",
                        help="time a server instead of our engine: 'vllm' starts plain and speculative servers "
                             "from vLLM's venv (python -m playground.serve setup vllm), 'llamacpp' llama.cpp's "
                             "llama-server from the exported command (python -m playground.serve setup "
                             "llama-server); URLs attach to running servers, the first the plain baseline")
    served.add_argument("--served-methods", default="draft_model,ngram", metavar="M1,M2",
                        help="speculative deployments beside the plain one (draft_model, ngram)")
    served.add_argument("--concurrency", metavar="N1,N2,...",
                        help="also time N simultaneous requests per deployment, e.g. 1,2,4,8")
    peers.add_flag(served)
    out = p.add_argument_group("outputs (each written atomically at the end)")
    for name, what in (("json", "everything"), ("csv", "one row per prompt, category and setting"),
                       ("html", "self-contained plotly report"),
                       ("png", "speedup-vs-gamma plot (needs a gamma sweep)")):
        out.add_argument(f"--{name}", type=output_path, metavar="PATH", help=what)
    board_cli.add_flags(p)
    placed = {action.dest for action in p._actions}  # a knob not placed above still gets its flag, here
    add_knob_flags(models, [name for name in RUN_FLAGS if name not in placed])
    return p


RUN_FLAGS = [k.name for k in KNOBS.values() if k.name != "pair"]  # every knob has its flag


def take_suggestions(args, spec) -> None:
    """A knob the pair suggests (registry.PairSpec.suggested) and the command line did not give
    takes the pair's value (args.suggested names them); knobs this command has no flag for are left alone."""
    args.suggested = set()
    for name, value in spec.suggested(getattr(args, "draft", None)).items():
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, value)
            args.suggested.add(name)


def base_run(args, pair: str) -> RunConfig:
    """The flags as one run, the sweep's base; their cross-field rules (n-gram max >= min) are
    checked before any sweep value is, so the message names the flag."""
    try:
        return RunConfig(pair=pair, **{name: getattr(args, name) for name in RUN_FLAGS})
    except KnobError as error:
        raise SettingError(KNOBS[error.field].flag, str(error)) from None


REFERENCES = ("transformers", "llama.cpp", "onnxruntime-genai", "openvino")


def references(text: str) -> tuple[str, ...]:
    """--reference's comma-separated engines, each one of REFERENCES."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in REFERENCES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(REFERENCES)} (comma-separated), "
                                         f"got {text!r}")
    return names
