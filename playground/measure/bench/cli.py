"""`python -m playground.bench`: time our engine (and optionally transformers) over a prompt set.

Order of work: check every argument (no model loaded, nothing written), load the pair, measure
each cell of the sweep over every prompt (measure/bench/sweep.py, as the app's Sweep tab does), then
write the outputs, each atomically.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

from playground.config import KNOBS, MODEL, MODEL_QUANTIZATIONS, TREE
from playground.measure.bench import peers, sweep
from playground.measure.bench.board import cli as board_cli
from playground.measure.bench.console import format_report
from playground.measure.bench.flags import OUTPUTS, base_run, build_parser, take_suggestions
from playground.measure.bench.prompts import read_jsonl, select
from playground.measure.bench.sweep import Grid, Plan, SettingError, parse_axes


def make_plan(args) -> Plan:
    """Check prompts, pair name and every setting of the grid; raise SettingError naming the flag."""
    from playground.models.registry import load_registry
    from playground.models.userpairs import found_again

    try:
        prompts = read_jsonl(Path(args.prompts))
    except ValueError as error:
        raise SettingError("--prompts", str(error)) from None
    try:
        prompts = select(prompts, args.categories, args.limit)
    except ValueError as error:
        raise SettingError("--categories", str(error)) from None
    try:
        registry = args.registry = found_again(load_registry(), args.models_dir)
        spec = registry.pair(args.pair)
    except ValueError as error:
        raise SettingError("--pair", str(error)) from None
    check_target_quantizations(args)
    check_reference(args)
    take_suggestions(args, spec)
    args.command = shlex.join(["python", "-m", "playground.bench", *args.argv])
    if args.drafters is not None:
        if args.png and importlib.util.find_spec("kaleido") is None:
            raise SettingError("--png", "needs kaleido (pip install kaleido) and a local Chromium or Chrome")
        return board_cli.make_plan(args, registry, spec, prompts, base_run(args, spec.name))
    axes = parse_axes(args.sweep)
    plan = sweep.make_plan(Grid(base_run(args, spec.name), axes), prompts, repeats=args.repeats,
                           warmup=args.warmup, tree=args.tree, reference="transformers" in args.reference,
                           llamacpp="llama.cpp" in args.reference, ortgenai="onnxruntime-genai" in args.reference,
                           openvino="openvino" in args.reference,
                           command=args.command)
    plan = own_heads(args, spec, plan)
    if args.png and len({c.gamma for c in plan.cells}) < 2:
        raise SettingError("--png", "the speedup-vs-gamma plot needs a gamma sweep, "
                                    "e.g. --sweep gamma=1,2,4,8")
    if args.tree and any(c.drafter != MODEL for c in plan.cells):
        raise SettingError("--tree", "a tree is drafted by the draft model; drop the prompt_lookup drafter")
    if args.png and importlib.util.find_spec("kaleido") is None:
        raise SettingError("--png", "needs kaleido (pip install kaleido) and a local Chromium or Chrome")
    return plan


def check_reference(args) -> None:
    args.reference = args.reference or ()
    for name in ("llama.cpp", "onnxruntime-genai", "openvino"):
        if name in args.reference and args.served:
            raise SettingError("--reference", f"{name} is timed beside our engine, not with --served")
    peers.check(args)
    if "onnxruntime-genai" in args.reference and (args.temperature or 0) != 0:
        raise SettingError("--reference", "onnxruntime-genai is timed greedy: add --temperature 0")
    if "openvino" in args.reference and (args.temperature or 0) != 0:
        raise SettingError("--reference", "openvino is timed greedy: add --temperature 0")


def check_installed(args) -> None:
    """What the command asks of this machine rather than of its flags (kept out of make_plan, so a
    command can be checked where the optional extra is not built): --reference llama.cpp needs it."""
    from playground.measure.bench.references import llamacpp, onnxruntime_genai, openvino

    for name, engine in (("llama.cpp", llamacpp), ("onnxruntime-genai", onnxruntime_genai), ("openvino", openvino)):
        if name in (args.reference or ()):
            try:
                engine.check_installed()
            except ValueError as error:
                raise SettingError("--reference", str(error)) from None


def check_target_quantizations(args) -> None:
    flag, allowed = "--target-quantizations", ", ".join(MODEL_QUANTIZATIONS)
    if args.target_quantizations is None:
        return
    if not args.target_quantizations:
        raise SettingError(flag, f"expected a comma-separated list of {allowed}")
    for q in args.target_quantizations:
        if q not in MODEL_QUANTIZATIONS:
            raise SettingError(flag, f"expected each of {allowed}, got {q!r}")
    if args.target_quantization != KNOBS["target_quantization"].default:
        raise SettingError(flag, "give either --target-quantization or --target-quantizations")
    for name in ("csv", "html", "png"):
        if getattr(args, name) is not None:
            raise SettingError(f"--{name}", "not with --target-quantizations (write --json)")


def load_pair(args, plan: Plan, cache, cell=None):
    """The pair as `cell` quantizes it (the first cell by default; compare_targets sets the target's)."""
    from tqdm import tqdm

    from playground.measure.bench.resident import mark

    mark()  # the baseline of the measured resident memory: the first load's, before it (later calls keep it)
    run = replace(cell or plan.cells[0], target_quantization=args.target_quantization)
    return cache.get(plan.pair, **run.loading(), dtype=args.dtype, device=args.device,
                     progress=lambda message, fraction: tqdm.write(message, file=sys.stderr))


def run_benchmark(args, plan: Plan, cache) -> dict:
    """Every cell of the grid on the same prompts, each on the pair it names (the cache frees the
    previous pair first when a cell's draft quantization differs)."""
    from tqdm import tqdm

    from playground.measure.bench.machine import busy_warning

    if args.drafters is not None:
        report = board_cli.run(args, plan, partial(load_pair, args, plan, cache), run_config(args, plan))
    else:
        with tqdm(total=plan.total_runs, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
            report = sweep.run(plan, partial(load_pair, args, plan, cache), run_config(args, plan),
                               partial(show_progress, bar))
    warning = busy_warning(report["environment"]["others_cpu_share"])
    if warning:
        print(warning, file=sys.stderr)
    return report


def show_progress(bar, step: sweep.Progress) -> None:
    """A prompt can take minutes on a CPU: say which run just finished, and each prompt's outcome."""
    bar.update(step.done - bar.n)
    if step.record is not None:
        bar.set_postfix_str(f"{step.what}: speedup {step.record['speedup']:.2f}x, "
                            f"alpha {step.record['alpha']:.2f}")
    else:
        bar.set_postfix_str(step.what)


def run_config(args, plan: Plan) -> dict:
    from playground.engine.factory import tree_shape

    base = plan.grid.base
    return {"pair": plan.pair, "drafter": args.drafter, "ngram_min": args.ngram_min, "ngram_max": args.ngram_max,
            "draft_vocab": args.draft_vocab, "prompts": args.prompts,
            "categories": args.categories,
            "limit_per_category": args.limit, "repeats": args.repeats, "warmup": args.warmup,
            "reference": ",".join(args.reference or ()) or None, "sweep": args.sweep, "drafters": args.drafters,
            "prompt_count": len(plan.prompts),
            "tree": tree_shape(base) if args.tree or base.speculation == TREE else None,
            **({"gamma_followed": asdict(args.followed)} if getattr(args, "followed", None) else {}),
            **({"draft_head": args.head} if getattr(args, "head", None) else {})}


def write_outputs(report: dict, args) -> None:
    from playground.measure.bench.charts import write_gamma_png, write_html
    from playground.measure.bench.report import write_csv, write_json

    writers = {"json": write_json, "csv": write_csv, "html": write_html,
               "png": board_cli.write_png if args.drafters is not None else write_gamma_png}
    for name in OUTPUTS:
        path = getattr(args, name)
        if path is not None:
            writers[name](report, path)
            print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        plan = make_plan(args)
        check_installed(args)
    except SettingError as error:
        parser.error(f"argument {error.flag}: {error}")
    quiet_transformers()
    if args.peers:
        return peers.peers_main(argv, main)
    if args.served:
        from playground.measure.bench.served.bench import served_main
        return served_main(parser, args, plan)
    if args.target_quantizations:
        return compare_targets(parser, args, plan)
    from playground.models.pair_cache import PairCache

    cache = PairCache(args.registry)  # make_plan's: the user's kept pairs merged, a moved model found again
    try:
        check_drafters(parser, plan, load_pair(args, plan, cache))
        check_gguf(parser, plan, load_pair(args, plan, cache))
        plan = choose_head(args, plan, cache)  # first: c, which γ follows from, is the kept head's
        plan = follow_gamma(args, plan, cache)
        report = run_benchmark(args, plan, cache)
    except SettingError as error:  # the board's budget, known once a plain step is timed
        parser.error(f"argument {error.flag}: {error}")
    except (ValueError, RuntimeError) as error:  # a draft quantization that fails to load, say
        print(f"{parser.prog}: error: could not load pair {plan.pair!r}: {error}", file=sys.stderr)
        return 1
    print(format_report(report))
    if args.drafters is not None:
        from playground.measure.bench.board.table import format_board
        print(format_board(report))
    try:
        write_outputs(report, args)
    except (OSError, RuntimeError) as error:  # e.g. a full disk, or no Chromium for the PNG
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    return 0


def own_heads(args, spec, plan: Plan) -> Plan:
    """The pair's draft vocabulary is its own draft's head: swept to other drafts (`--sweep draft=...`)
    without --draft-vocab, each cell drafts over its draft's suggestion (0, its whole head, for another
    model) instead of the pair's cut, which broke SmolLM2's build and was refused for Gemma (issue 55)."""
    from dataclasses import replace

    if "draft_vocab" not in args.suggested or "draft" not in plan.grid.axes:
        return plan
    cells = [replace(c, draft_vocab=spec.suggested(c.draft)["draft_vocab"]) for c in plan.cells]
    return replace(plan, cells=cells)


def choose_head(args, plan: Plan, cache) -> Plan:
    """Without --draft-vocab, the pair's draft vocabulary is the machine's to choose: where the draft's
    runner does not make a cut head cheaper (runners/auto.py), the draft's plain step is timed cut and
    whole once per machine, said, and kept in the report's config (`draft_head`), and every cell on the
    pair's draft drafts with the faster head (runners/warmup.chosen_head). A draft vocabulary given or
    swept, and the drafts board's entries, run as given."""
    from tqdm import tqdm

    from playground.engine import factory
    from playground.engine.runners.warmup import build_models, chosen_head, head_choice

    args.head = None
    if "draft_vocab" not in args.suggested or "draft_vocab" in plan.grid.axes or args.drafters is not None \
            or not any(cell.draft_vocab for cell in plan.cells):  # no cut to choose (other drafts: own_heads)
        return plan
    pair, first = load_pair(args, plan, cache), plan.cells[0]  # the pair as the first cell loads it

    def draft_of(cell):  # None for a cell on another draft, or whose drafter runs none
        same = (cell.draft, cell.draft_quantization) == (first.draft, first.draft_quantization)
        return factory.Models.of(pair, cell).draft if same else None

    for cell in [cell for cell in plan.cells if cell.draft_vocab and draft_of(cell) is not None]:
        for event in build_models(pair.target.model, draft_of(cell), cell, head=True):
            tqdm.write(sweep.build_text(event, "the draft's head"), file=sys.stderr)
    base = plan.grid.base
    args.head = head_choice(draft_of(base), base)
    cells = [chosen_head(draft_of(cell), cell) for cell in plan.cells]
    return replace(plan, grid=replace(plan.grid, base=chosen_head(draft_of(base), base)), cells=cells)


def follow_gamma(args, plan: Plan, cache) -> Plan:
    """Without --gamma, the pair's γ follows this machine (measure/bench/follow.py): measured once the
    pair is loaded, printed, and kept in the report's config."""
    from tqdm import tqdm

    from playground.measure.bench.follow import followed_plan

    args.followed = None
    if "gamma" not in args.suggested or args.drafters is not None:  # the board picks each drafter's γ itself
        return plan
    plan, args.followed = followed_plan(plan, load_pair(args, plan, cache), cache.registry.pair(plan.pair),
                                        lambda line: tqdm.write(line, file=sys.stderr))
    return plan


def check_gguf(parser, plan: Plan, pair) -> None:
    """--reference llama.cpp: the target must have been loaded from a GGUF file, before anything is timed."""
    from playground.measure.bench.references.llamacpp import gguf_path

    if plan.llamacpp:
        try:
            gguf_path(pair.target.model)
        except ValueError as error:
            parser.error(f"argument --reference: {error}")
    if plan.openvino:
        from playground.measure.bench.references.openvino import model_file
        try:
            model_file(pair.target.model)
        except ValueError as error:
            parser.error(f"argument --reference: {error}")


def check_drafters(parser, plan: Plan, pair) -> None:
    """Each cell's draft vocabulary against the loaded draft, before anything is timed."""
    from playground.engine import factory
    for cell in plan.cells:
        if cell.draft_vocab:
            try:
                factory.make_drafter(cell, factory.Models.of(pair))
            except ValueError as error:
                flag = "--sweep" if len({c.draft_vocab for c in plan.cells}) > 1 else "--draft-vocab"
                parser.error(f"argument {flag}: {error}")


def compare_targets(parser, args, plan: Plan) -> int:
    """--target-quantizations: one report per target quantization, then the comparison table.
    One pair is loaded at a time (the cache frees the previous), so memory holds one target."""
    from argparse import Namespace

    from playground.models.pair_cache import PairCache
    from playground.measure.bench.compare import comparison, format_comparison
    from playground.measure.bench.report import SCHEMA, write_json
    from playground.measure.bench.verify_cost import MAX_K, measure_curve

    cache, reports, curves = PairCache(args.registry), {}, {}
    for q in args.target_quantizations:
        one = Namespace(**{**vars(args), "target_quantization": q})
        try:
            pair = load_pair(one, plan, cache)
        except (ValueError, RuntimeError) as error:
            print(f"{parser.prog}: error: could not load pair {plan.pair!r} with target {q}: {error}",
                  file=sys.stderr)
            return 1
        check_drafters(parser, plan, pair)
        check_gguf(parser, plan, pair)
        curves[q] = measure_curve(pair.target.model, max_k=MAX_K, repeats=3,
                                  key=(pair.target.name, q, pair.target.dtype, pair.target.device))
        del pair
        reports[q] = run_benchmark(one, plan, cache)
        print(f"target quantization {q}:\n{format_report(reports[q])}")
    table = comparison(reports, curves)
    print(format_comparison(table))
    if args.json is not None:
        try:
            write_json({"schema": SCHEMA, "command": plan.command, "comparison": table, "reports": reports},
                       args.json)
        except OSError as error:
            print(f"{parser.prog}: error: {error}", file=sys.stderr)
            return 1
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def quiet_transformers() -> None:
    """transformers warns on every assisted call about its own internal arguments;
    the benchmark prints what matters itself."""
    from transformers.utils import logging

    logging.set_verbosity_error()

