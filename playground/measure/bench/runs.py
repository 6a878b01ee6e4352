"""Timing one prompt honestly: every method in the same process, same settings and seed,
alternated over repeats, the median run reported.

Tokens/s = new tokens / wall seconds of the whole call, prefill included, measured the same way
for our engine and for transformers (clocks read after a CUDA synchronize). Beside it, decode-only
tokens/s: the tokens after the first one over the seconds after it, since speculation shortens
decoding and leaves the prefill as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from playground.config import PROMPT_LOOKUP, TREE, RunConfig
from playground.engine import factory
from playground.engine.generate import SpecConfig, clock, generate
from playground.engine.memory import drafter_bytes, model_bytes
from playground.engine.events import (StepEvent, acceptance_by_rank, costs, from_draft, output_tokens,
                                      position_counts, steady_events, summarize, tree_costs)
from playground.measure.bench.divergence import first_divergence, margin_at, near_tie, reruns
from playground.measure.bench.resident import first_growth, grown_bytes
from playground.models.handle import trim_heap
from playground.measure.bench.references import llamacpp as reference_llamacpp
from playground.measure.bench.references import onnxruntime_genai as reference_ortgenai
from playground.measure.bench.references import openvino as reference_openvino
from playground.measure.bench.references.transformers import hf_generate

WARMUP_TOKENS = 16  # warm-up runs exercise every code path; they need not be full length


class Interrupted(Exception):
    """A run ended between two engine steps because its page pressed Stop (Setup.stopped)."""


@dataclass(frozen=True)
class Run:
    """One timed generation."""

    tokens: list[int]
    seconds: float
    events: list[StepEvent] = field(default_factory=list)  # empty for transformers' runs
    first_seconds: float | None = None  # until the first new token: the prefill (None: not timed)
    first_tokens: int = 1  # tokens out by then (a speculative first step may give several)
    stats: dict = field(default_factory=dict)  # an engine's own counters (onnxruntime-genai's speculative stats)
    # counted (ours): the weights run plus what the drafter keeps (engine/memory.py); None: not counted
    weights_bytes: int | None = None
    # measured (resident.py): ours, what the process grew by since before its first model loaded, read
    # at the run's end, other engines' loops taken out; another engine's loop, what its first call
    # added; None: not measured (no baseline marked)
    resident_bytes: int | None = None

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds else 0.0

    @property
    def decode_tokens(self) -> int:
        return len(self.tokens) - self.first_tokens if self.first_seconds is not None else 0

    @property
    def decode_seconds(self) -> float:
        return self.seconds - self.first_seconds if self.first_seconds is not None else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the seconds after it (0 when not timed or one token long)."""
        return self.decode_tokens / self.decode_seconds if self.decode_tokens > 0 and self.decode_seconds else 0.0

    def decode_fields(self, name: str) -> dict:
        """This run's decoding after its first token, as the raw sums a summary pools and as a rate."""
        return {f"{name}_decode_tokens": self.decode_tokens, f"{name}_decode_seconds": self.decode_seconds,
                f"{name}_decode_tok_s": self.decode_tok_s}


@dataclass
class Setup:
    """The models and options shared by every prompt of a benchmark run."""

    target: object
    draft: object | None
    run: RunConfig  # its drafter knobs (kind, n-gram sizes, draft vocabulary) build each run's drafter
    eos: tuple[int, ...]
    pad_token_id: int | None = None
    reference: bool = False  # also time transformers' generate() and assisted generation
    tree: bool = False  # also time a token tree from the same draft, shaped by the run's tree knobs
    llamacpp: bool = False  # also time llama.cpp's own plain decoding of the target's GGUF file
    ortgenai: bool = False  # also time onnxruntime-genai's own loop, plain and speculative
    openvino: bool = False  # also time OpenVINO GenAI's LLMPipeline on the GGUF files, plain and speculative
    target_tokenizer: object | None = None
    draft_tokenizer: object | None = None  # the draft's own, when it is not the target's (across tokenizers)
    stopped: Callable[[], bool] | None = None  # asked after every engine step: a page's Stop ends a run there

    @property
    def drafter(self) -> str:
        return self.run.drafter

    @property
    def models(self) -> factory.Models:
        return factory.Models(self.target, self.draft, self.target_tokenizer, self.draft_tokenizer)

    @classmethod
    def of(cls, pair, run: RunConfig, tree: bool = False, reference: bool = False,
           llamacpp: bool = False, ortgenai: bool = False, openvino: bool = False) -> "Setup":
        """The Setup of a loaded pair (loading.LoadedPair): its models, end tokens and the drafter
        the run describes (kind, n-gram sizes, draft vocabulary, tree shape). The app's race,
        sweep and theory measure through this, as the CLI does."""

        references = reference or ortgenai or openvino  # other engines' speculative loops run the draft model
        models = factory.Models.of(pair, None if references else run)
        return cls(pair.target.model, models.draft, run, pair.eos,
                   pair.tokenizer.pad_token_id, reference=reference, tree=tree, llamacpp=llamacpp,
                   ortgenai=ortgenai, openvino=openvino, target_tokenizer=models.target_tokenizer,
                   draft_tokenizer=models.draft_tokenizer)

    def make_drafter(self):
        return factory.make_drafter(self.run, self.models)

    def make_tree_drafter(self):
        return factory.make_drafter(replace(self.run, speculation=TREE), self.models)

    def tree_moves(self, config: SpecConfig) -> bool:
        """Whether a tree runs on another runner than this run's chain (under auto, a chains-only runner)."""
        from playground.engine.runners import resolve

        device = getattr(self.target, "device", "cpu")
        return resolve(config.runner, device, True, self.target) != resolve(config.runner, device, config.tree,
                                                                            self.target)

    def methods(self, config: SpecConfig) -> dict[str, Callable[[list[int]], Run]]:
        """Each timed method as a function of the prompt ids, in the order they first run."""
        methods = {
            "baseline": lambda ids: engine_run(self.target, ids, config, None, self.eos, self.stopped),
            "speculative": lambda ids: engine_run(self.target, ids, config, self.make_drafter(), self.eos,
                                                  self.stopped),
        }
        if self.tree:
            methods["tree"] = lambda ids: engine_run(self.target, ids, config, self.make_tree_drafter(), self.eos,
                                                     self.stopped)
            if self.tree_moves(config):  # the tree's speedup is over plain decoding on the tree's own runner
                methods["tree_baseline"] = lambda ids: engine_run(self.target, ids, replace(config, tree=True), None,
                                                                  self.eos, self.stopped)
        if self.reference:
            lookup = self.drafter == PROMPT_LOOKUP
            methods["hf_generate"] = lambda ids: hf_run(self, ids, config)
            assistant = None if lookup else self.draft
            methods["hf_assisted"] = lambda ids: hf_run(self, ids, config, assistant, lookup)
        if self.llamacpp:
            methods["llamacpp"] = lambda ids: llamacpp_run(self, ids, config)
        if self.ortgenai:
            methods["ortgenai"] = lambda ids: ortgenai_run(self, ids, config)
            if self.drafter != PROMPT_LOOKUP:
                methods["ortgenai_speculative"] = lambda ids: ortgenai_run(self, ids, config, self.draft)
        if self.openvino:
            methods["openvino"] = lambda ids: openvino_run(self, ids, config)
            drafts = self.drafter != PROMPT_LOOKUP and self.draft is not None
            tokenizers = (self.target_tokenizer, self.draft_tokenizer)
            if drafts and reference_openvino.speculative_problem(self.target, self.draft, tokenizers) is None:
                methods["openvino_speculative"] = lambda ids: openvino_run(self, ids, config, self.draft)
        return methods


def engine_run(target, ids, config: SpecConfig, drafter, eos, stopped: Callable[[], bool] | None = None) -> Run:
    started = clock(target.device)
    events, first = [], None
    for event in generate(target, ids, config, drafter, eos_token_ids=eos):
        if stopped is not None and stopped():
            raise Interrupted("stopped")
        events.append(event)
        if first is None:  # the step that read the prompt: its end is where decoding starts
            first = clock(target.device) - started
    seconds = clock(target.device) - started
    trim_heap()  # what the run freed goes back to the system before its memory is read, not timed
    return Run(output_tokens(events), seconds, events, first, len(output_tokens(events[:1])),
               weights_bytes=model_bytes(target) + (drafter_bytes(drafter) if drafter is not None else 0),
               resident_bytes=grown_bytes())  # read after the clock stops: one system call, not timed


def hf_run(setup: Setup, ids, config, assistant=None, prompt_lookup=False) -> Run:
    tokens, seconds = hf_generate(setup.target, ids, config, setup.eos, setup.pad_token_id, assistant,
                                  prompt_lookup)
    return Run(tokens, seconds)


def llamacpp_run(setup: Setup, ids, config) -> Run:
    (tokens, seconds, first), held = first_growth(
        setup.target, ("llamacpp",), lambda: reference_llamacpp.plain_decode(setup.target, ids, config, setup.eos))
    return Run(tokens, seconds, first_seconds=first, resident_bytes=held)


def ortgenai_run(setup: Setup, ids, config, draft=None) -> Run:
    (tokens, seconds, first, stats), held = first_growth(
        setup.target, ("ortgenai", id(draft)),
        lambda: reference_ortgenai.decode(setup.target, ids, config, setup.eos, draft))
    return Run(tokens, seconds, first_seconds=first, first_tokens=1, stats=stats, resident_bytes=held)


def openvino_run(setup: Setup, ids, config, draft=None) -> Run:
    tokenizers = (setup.target_tokenizer, setup.draft_tokenizer)
    (tokens, seconds, first, stats), held = first_growth(
        setup.target, ("openvino", id(draft)),
        lambda: reference_openvino.decode(setup.target, ids, config, setup.eos, draft, tokenizers))
    return Run(tokens, seconds, first_seconds=first, first_tokens=1, stats=stats, resident_bytes=held)


def warm_up(setup: Setup, ids: list[int], config: SpecConfig, times: int) -> None:
    """Untimed short runs of every method: first calls pay for allocation, kernel selection, caches; on
    the runners a whole run of `ids` steps on (auto chooses per context: runners_for)."""
    short = replace(config, max_new_tokens=min(config.max_new_tokens, WARMUP_TOKENS),
                    runners_for=config.chosen_for(len(ids)))
    for _ in range(times):
        for method in setup.methods(short).values():
            method(ids)


Progress = Callable[[str, int, int], None]  # (method just run, runs done, runs in all)


def time_methods(setup: Setup, ids: list[int], config: SpecConfig, repeats: int,
                 progress: Progress | None = None) -> dict[str, list[Run]]:
    methods = setup.methods(config)
    return alternate({name: (lambda m=m: m(ids)) for name, m in methods.items()}, repeats, progress)


def alternate(methods: dict[str, Callable[[], Run]], repeats: int,
              progress: Progress | None = None) -> dict[str, list[Run]]:
    """Run every method once per repeat, rotating the order so none always runs first (or right
    after the same neighbour): slow drifts (clock boost, heat, a busy neighbour) hit all alike."""
    names = list(methods)
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for i, name in enumerate(names[shift:] + names[:shift]):
            runs[name].append(methods[name]())
            if progress:
                progress(name, r * len(names) + i + 1, repeats * len(names))
    return runs


def median_run(runs: list[Run]) -> Run:
    """The run with the median wall time (the lower middle for an even count: a real run)."""
    return sorted(runs, key=lambda r: r.seconds)[(len(runs) - 1) // 2]


def measure_prompt(setup: Setup, ids: list[int], config: SpecConfig, repeats: int,
                   progress: Progress | None = None) -> dict:
    """Every per-prompt field of the report, for one prompt at one setting."""
    timed = time_methods(setup, ids, config, repeats, progress)
    runs = {name: median_run(rs) for name, rs in timed.items()}
    base, spec = runs["baseline"], runs["speculative"]
    record = {"prompt_tokens": len(ids), **speed_fields(base, spec), **speculation_fields(base, spec)}
    if setup.target_tokenizer is not None:  # what a server's text is held to (--peers)
        record["baseline_text"] = setup.target_tokenizer.decode(base.tokens, skip_special_tokens=True)
    record.update(identity_fields(setup, ids, config, base, spec))
    if setup.reference:
        record.update(reference_fields(runs, config))
    if "tree" in runs:
        record.update(tree_fields(runs.get("tree_baseline", base), spec, runs["tree"], config))
    if "llamacpp" in runs:
        record.update(reference_llamacpp.record_fields(runs, config))
    if "ortgenai" in runs:
        record.update(reference_ortgenai.record_fields(runs))
    if "openvino" in runs:
        record.update(reference_openvino.record_fields(runs))
    return record


def speed_fields(base: Run, spec: Run) -> dict:
    return {
        "new_tokens": len(spec.tokens),
        "baseline_new_tokens": len(base.tokens),
        "baseline_seconds": base.seconds,
        "speculative_seconds": spec.seconds,
        "baseline_tok_s": base.tok_s,
        "speculative_tok_s": spec.tok_s,
        "speedup": spec.tok_s / base.tok_s if base.tok_s else 0.0,
        "finish": spec.events[-1].finish if spec.events else None,
        **base.decode_fields("baseline"),
        **spec.decode_fields("speculative"),
        "decode_speedup": spec.decode_tok_s / base.decode_tok_s if base.decode_tok_s else 0.0,
        **memory_fields("baseline", base),
        **memory_fields("speculative", spec),
    }


def memory_fields(name: str, run: Run) -> dict:
    """A run's memory under two names: the weights counted (engine/memory.py) and the resident
    growth measured (resident.py); MB, None where not counted or not measured."""
    mb = lambda n: None if n is None else n / 2**20
    return {f"{name}_weights_mb": mb(run.weights_bytes), f"{name}_resident_mb": mb(run.resident_bytes)}


def speculation_fields(base: Run, spec: Run) -> dict:
    """Acceptance and cost from the speculative run's events, with the raw sums the summary pools."""
    m = summarize(spec.events, baseline=base.events)
    spec_cost, base_cost = costs(spec.events), costs(base.events)  # decoding calls only
    drafted_at, accepted_at = position_counts(spec.events)
    return {
        "acceptance_rate": m.acceptance_rate,
        "mean_accepted_tokens": m.mean_tokens_per_call,  # tokens per target call (Spec-Bench's metric)
        "alpha": m.alpha,
        "mean_gamma": m.mean_gamma,
        "c": m.c,
        "predicted_speedup": m.predicted_speedup,
        "target_calls": m.target_calls,
        "drafted": m.drafted,
        "accepted": m.accepted,
        "tested": sum(e.n_tested for e in spec.events),
        "position_drafted": drafted_at,  # per draft position: how often drafted, and accepted
        "position_accepted": accepted_at,
        # which generated tokens came from the drafter: the board's coverage row (greedy runs of
        # every drafter share the plain run's tokens, so their marks line up)
        "output_tokens": spec.tokens,
        "from_draft": "".join("1" if d else "0" for d in from_draft(spec.events)),
        "baseline_calls": len(base.events),
        # per-forward costs pool these sums, over the calls that decode only (not the prompt's)
        "draft_seconds": spec_cost.draft_s,
        "cost_drafted": spec_cost.drafted,
        "verify_seconds": spec_cost.verify_s,
        "cost_calls": spec_cost.calls,
        "baseline_call_seconds": base_cost.verify_s,
        "cost_baseline_calls": base_cost.calls,
    }


def identity_fields(setup: Setup, ids, config: SpecConfig, base: Run, spec: Run) -> dict:
    """Greedy only: did speculation reproduce the baseline? If not, where, and how close a tie."""
    if config.temperature != 0:
        return {"identical": None, "first_divergence": None, "divergence_margin": None}
    position = first_divergence(base.tokens, spec.tokens)
    if position is None:
        return {"identical": True, "first_divergence": None, "divergence_margin": None}
    return {"identical": False, "first_divergence": position,
            "divergence_margin": divergence_margins(setup, ids, config, position)}


def divergence_margins(setup: Setup, ids, config: SpecConfig, position: int) -> dict:
    """The target's top-2 logit margin at `position` in each run, from untimed reruns with detail
    (divergence.reruns), and whether both are below divergence.NEAR_TIE."""
    base, spec = reruns(setup.target, ids, config, setup.make_drafter(), setup.eos, position)
    margins = {"baseline": margin_at(base, position), "speculative": margin_at(spec, position)}
    return {**margins, "near_tie": near_tie(margins.values())}


def reference_fields(runs: dict[str, Run], config: SpecConfig) -> dict:
    gen, assisted, base = runs["hf_generate"], runs["hf_assisted"], runs["baseline"]
    return {
        "hf_generate_new_tokens": len(gen.tokens),
        "hf_generate_seconds": gen.seconds,
        "hf_generate_tok_s": gen.tok_s,
        "hf_assisted_new_tokens": len(assisted.tokens),
        "hf_assisted_seconds": assisted.seconds,
        "hf_assisted_tok_s": assisted.tok_s,
        "hf_assisted_speedup": assisted.tok_s / gen.tok_s if gen.tok_s else 0.0,
        # greedy: transformers' own decoding must give our baseline's tokens (a check on the baseline)
        "hf_generate_identical": gen.tokens == base.tokens if config.temperature == 0 else None,
    }


def tree_fields(base: Run, chain: Run, tree: Run, config: SpecConfig) -> dict:
    """The tree beside the chain: speed, accepted tokens per call, and the raw sums behind its
    costs (decoding calls only): nodes verified, draft forwards (one per depth) and their seconds.
    `base`: plain decoding on the tree's runner (where the chain's cannot verify trees, a run of its own)."""
    steady = [e for e in steady_events(tree.events) if e.tree is not None]
    cost = tree_costs(tree.events)  # the engine's sums over those calls, drafts counted per depth
    hits, trials = acceptance_by_rank(tree.events)
    return {
        "tree_new_tokens": len(tree.tokens),
        "tree_seconds": tree.seconds,
        "tree_tok_s": tree.tok_s,
        "tree_speedup": tree.tok_s / base.tok_s if base.tok_s else 0.0,
        "tree_over_chain": tree.tok_s / chain.tok_s if chain.tok_s else 0.0,
        "tree_target_calls": len(tree.events),
        "tree_accepted": sum(e.n_accepted for e in tree.events),
        "tree_identical": tree.tokens == base.tokens if config.temperature == 0 else None,
        "tree_cost_calls": cost.calls,
        "tree_nodes": sum(len(e.tree.nodes) for e in steady),
        "tree_draft_forwards": cost.drafted,
        "tree_draft_seconds": cost.draft_s,
        "tree_verify_seconds": cost.verify_s,
        "tree_rank_hits": hits,  # per child rank: how often the k-th candidate was the one kept...
        "tree_rank_trials": trials,  # ...of how many reached nodes that had a k-th child
    }
