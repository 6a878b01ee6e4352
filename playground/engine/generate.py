"""The speculative decoding loop at batch size 1: draft, verify, accept, roll back.

`generate` yields one StepEvent per target call and never prints. With no drafter the same loop
is plain autoregressive decoding, so a baseline and a speculative run differ only in speculation.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Iterator

import torch

from playground.engine.clock import StepClock, clock  # noqa: F401 (clock: the measurements read it here)
from playground.engine.describe import describe_step, describe_tree_step
from playground.engine.drafters import Draft, Drafter, TreeDraft
from playground.engine.events import StepEvent
from playground.engine.kvcache import CachedModel
from playground.engine.stopping import cut_output
from playground.engine.sampling import (
    Sampling,
    Verdict,
    common_width,
    display_probs,
    greedy_verify,
    logits_to_probs,
    speculative_verify,
)
from playground.engine.tree import TreeVerdict, candidate_rows, greedy_tree_verify, sampled_tree_verify

from playground.config import CHAIN, KNOBS, SPECULATIONS, TREE, check, check_int


@dataclass(frozen=True)
class SpecConfig:
    """The decoding knobs of a run (RunConfig's "decoding" group: defaults and ranges declared
    there, once) and the engine-only options. Validated on creation; errors name the field."""

    gamma: int = KNOBS["gamma"].default  # lookahead: tokens drafted per target call (adaptive: the first's)
    adaptive: bool = KNOBS["adaptive"].default  # gamma +2 after a full acceptance, -1 after a rejection
    gamma_min: int = KNOBS["gamma_min"].default  # bounds of the adaptive schedule
    gamma_max: int = KNOBS["gamma_max"].default
    min_confidence: float = KNOBS["min_confidence"].default  # stop drafting under this top probability
    temperature: float = KNOBS["temperature"].default  # 0 is greedy
    top_k: int = KNOBS["top_k"].default  # 0 is off
    top_p: float = KNOBS["top_p"].default  # 1 is off
    seed: int = KNOBS["seed"].default  # seeds the run's own generators; nothing global is reseeded
    max_new_tokens: int = KNOBS["max_new_tokens"].default
    runner: str = KNOBS["runner"].default  # how the target's forwards run; a drafter has its own
    # the run verifies token trees: its target runs where trees can (auto passes over a chains-only
    # runner), and so does its baseline, given the same config, so both run on one runner
    tree: bool = False
    stop_strings: tuple[str, ...] = ()
    detail: int = 0  # record the top-`detail` tokens of p, q and the residual in each event
    runners_for: int = 0  # entries its runners are chosen for (chosen_for); 0: the run's own
    sampling: Sampling = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        check(self)
        check_int("detail", self.detail, low=0, high=1000)
        check_int("runners_for", self.runners_for, low=0, high=2**31 - 1)
        if not isinstance(self.stop_strings, (tuple, list)) or not all(
            isinstance(s, str) and s for s in self.stop_strings
        ):
            raise ValueError(f"stop_strings must be a list of non-empty strings, got {self.stop_strings!r}")
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        object.__setattr__(self, "sampling", Sampling(self.temperature, self.top_k, self.top_p))

    def chosen_for(self, prompt_tokens: int) -> int:
        """Entries the runners are chosen for (runners/choice.py): prompt and new, or runners_for's (a warm-up's)."""
        return self.runners_for or prompt_tokens + self.max_new_tokens


@dataclass(frozen=True)
class Decoding:
    """What every step of one generation shares, so a step takes (state, context, lookahead): the
    target with its cache, the drafter (None: autoregressive), the knobs, the run's generators,
    the end-of-turn tokens, and whether every forward runs outside torch (outside_torch)."""

    lm: CachedModel
    drafter: Drafter | None
    config: SpecConfig
    generators: Generators
    eos: frozenset[int] = frozenset()
    one_thread: bool = False


def start(target, drafter: Drafter | None, config: SpecConfig, eos_token_ids=(), entries: int = 0) -> Decoding:
    """One run's decoding state: its caches on the runners chosen for `entries` (0: a short run), fresh generators."""
    lm = CachedModel(target, runner=config.runner, tree=config.tree or getattr(drafter, "speculation", None) == TREE)
    for model in [lm, *drafter_models(drafter)]:  # before outside_torch asks which runners the run has
        model.run_on(entries)
    return Decoding(lm, drafter, config, Generators(config.seed), frozenset(eos_token_ids), outside_torch(lm, drafter))


def generate(
    target,
    prompt_ids: list[int],
    config: SpecConfig = SpecConfig(),
    drafter: Drafter | None = None,
    *,
    eos_token_ids: tuple[int, ...] | list[int] = (),
    tokenizer=None,
) -> Iterator[StepEvent]:
    """Decode from `target` (any transformers causal LM), yielding a StepEvent per target call.

    drafter None gives the autoregressive baseline. `tokenizer` is needed only for stop strings.
    Stop early by closing the iterator: no work is done between events.
    """
    prompt_ids = [int(t) for t in (prompt_ids.tolist() if torch.is_tensor(prompt_ids) else prompt_ids)]
    check_inputs(target, prompt_ids, config, drafter, tokenizer)
    state = start(target, drafter, config, eos_token_ids, config.chosen_for(len(prompt_ids)))
    with torch_threads(1 if state.one_thread else None):  # the whole run, between its steps too
        begin(state, prompt_ids)
        context, gamma, produced, index = list(prompt_ids), config.gamma, 0, 0
        while True:
            event = step(state, context, gamma, room=config.max_new_tokens - produced - 1)
            emitted, finish = cut_output(event, context, produced, config, state.eos, tokenizer)
            event = replace(event, index=index, emitted=emitted, finish=finish,
                            prompt_tokens=len(prompt_ids) if index == 0 else 0)
            context += emitted
            produced += len(emitted)
            yield event
            if finish:
                return
            if config.adaptive and event.drafts:
                gamma = next_gamma(gamma, len(event.drafts), event.n_accepted, config.gamma_min, config.gamma_max)
            index += 1


def torch_threads(n: int | None):
    """torch at `n` threads inside, as it was after (None: left alone). A run whose forwards all run
    on their own pools holds torch to one thread from its start to its end, between its steps too:
    a parallel torch op there (its caller's, while the run waits at a yield) left OpenMP's workers
    spinning into the next forward, and our plain step on ONNX Runtime measured 48.0 ms against
    43.3 ms with torch at one thread throughout (the default target, 2 cores; step_profile)."""
    return nullcontext() if n is None else held(torch.get_num_threads, torch.set_num_threads, n)


@contextmanager
def held(get: Callable, put: Callable, value):
    """put(value) inside, and what get() gave before put back after: a process-wide torch setting
    (threads here, the default dtype for the measurements' random models) changed for a while."""
    saved = get()
    put(value)
    try:
        yield
    finally:
        put(saved)


def step(state: Decoding, context: list[int], gamma: int, room: int) -> StepEvent:
    """One target call: a tree step, a chain step of up to gamma drafts, or a plain step (no drafter,
    or no room left for a draft: `room` is how many tokens may still be drafted). The event records
    the lookahead asked: the schedule's gamma for a chain, the tree's depth for a tree."""
    with torch_threads(1 if state.one_thread else None):
        return one_step(state, context, gamma, room)


OWN_POOLS = ("onnxruntime", "llamacpp")  # runners whose forwards run on their own thread pools


def outside_torch(lm: CachedModel, drafter) -> bool:
    """Whether every forward of the run runs outside torch (asked once, when the run starts). Then the
    engine's own tensor work (a softmax, an argmax, a pad) runs on one torch thread: after a parallel
    torch op its OpenMP workers spin, and on 2 cores they took the cores from ONNX Runtime's pool in the
    next forward (the default pair's draft measured c 0.58-0.63 at 2 torch threads, 0.37-0.39 at one)."""
    runners = [lm.runner] + [model.runner for model in drafter_models(drafter)]
    return all(runner.name in OWN_POOLS for runner in runners)


def drafter_models(drafter) -> list:
    """The cached models a drafter drafts with: its own, and those of the drafters it combines."""
    if drafter is None:
        return []
    found = [drafter.lm] if hasattr(drafter, "lm") else []
    for part in ("first", "fallback", "drafter"):  # a hybrid's two drafters, a self draft's
        if getattr(drafter, part, None) is not None:
            found += drafter_models(getattr(drafter, part))
    return found


def one_step(state: Decoding, context: list[int], gamma: int, room: int) -> StepEvent:
    drafter = state.drafter
    if drafter is not None and drafter.speculation == TREE and room > 0:
        return replace(tree_step(state, context, room), gamma=drafter.depth)
    k = min(gamma, room) if drafter is not None and drafter.speculation == CHAIN else 0
    return replace(speculative_step(state, context, k, reach_of(drafter, k, room, state.lm.runner)), gamma=gamma)


def reach_of(drafter, k: int, room: int, runner) -> int | None:
    """How far a drafter that may pass γ (the hybrid's `reach`) may propose this step: never past the
    tokens left, nor on a compiled target past the widest step recorded before the run (a new shape
    would compile inside the timed step). None: the drafter keeps to k."""
    if not k or not getattr(drafter, "reach", 0):
        return None
    ready = getattr(runner, "ready_rows", None)
    most = drafter.reach if ready is None else min(drafter.reach, ready() - 1)
    return min(max(k, most), room)


def check_inputs(target, prompt_ids, config, drafter, tokenizer) -> None:
    if not prompt_ids:
        raise ValueError("prompt must contain at least one token, got an empty prompt")
    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a SpecConfig, got {type(config).__name__}")
    if config.stop_strings and tokenizer is None:
        raise ValueError("stop_strings need the tokenizer: pass tokenizer=")
    if drafter is not None and not isinstance(drafter, Drafter):
        raise ValueError("drafter must follow the Drafter protocol (name, speculation, vocab_size, device, begin, "
                         f"propose), got {type(drafter).__name__}")
    if drafter is not None and drafter.speculation not in SPECULATIONS:
        raise ValueError(f"drafter.speculation must be one of {SPECULATIONS}, got {drafter.speculation!r}")
    width = target.config.get_text_config().vocab_size
    if drafter is not None and (drafter.vocab_size or 0) > width:  # the target could not read what it verifies
        raise ValueError(f"drafter: its q has {drafter.vocab_size} ids, the target's logits {width}: a draft "
                         f"wider than the target proposes ids the target cannot read; give it the target's "
                         f"width (ModelDrafter(draft, vocab_size={width})) so it drafts only the target's ids")
    problem = context_problem(target, prompt_ids, config)
    if problem:
        raise ValueError(problem)


def context_problem(target, prompt_ids, config) -> str | None:
    """Why this prompt and max_new_tokens do not fit the target's context, or None: a reason, not
    an error, so a caller may skip the prompt instead of failing."""
    limit = getattr(target.config.get_text_config(), "max_position_embeddings", None)
    if limit and len(prompt_ids) >= limit:
        return f"prompt is {len(prompt_ids)} tokens, but the target's context holds {limit}"
    if limit and len(prompt_ids) + config.max_new_tokens > limit:
        room = limit - len(prompt_ids)
        return (f"max_new_tokens must be at most {room} for this {len(prompt_ids)}-token prompt "
                f"(the target's context holds {limit}), got {config.max_new_tokens}")
    return None


def begin(state: Decoding, prompt_ids: list[int]) -> None:
    """Start a prompt with empty caches. There is no separate prefill call: the first step's
    target forward reads the prompt together with the first draft (and the draft model reads it
    in its first proposal), which saves one forward of each model per generation."""
    state.lm.reset()
    if state.drafter is not None:
        state.drafter.begin(prompt_ids)
        if hasattr(state.drafter, "plan"):  # a drafter that spreads one-time costs over the run (the hybrid)
            state.drafter.plan(state.config.max_new_tokens)
    entries = len(prompt_ids) + state.config.max_new_tokens  # a cache of fixed capacity sized once, here
    for lm in [state.lm, *drafter_models(state.drafter)]:
        lm.expect(entries)


# -- one target call: draft, verify, accept, roll back -----------------------------------------


@dataclass(frozen=True)
class Phases:
    """The four steps of a call, for one kind of speculation, and how its event is described."""

    draft: Callable  # (state, context, k) -> Draft | TreeDraft
    verify: Callable  # (state, context, draft) -> target logits, one forward
    accept: Callable  # (state, draft, target logits) -> (verdict, p shown, q shown)
    roll_back: Callable  # (state, context, verdict) -> None: the target's cache keeps what was accepted
    describe: Callable  # (draft, verdict, p, q, config) -> StepEvent


def timed_step(state: Decoding, context: list[int], k: int, phases: Phases) -> StepEvent:
    """Draft, verify in one target forward, accept and roll back, each timed on the engine's clock."""
    clock = StepClock(state.lm.device)
    draft = phases.draft(state, context, k)
    clock.mark()
    target_logits = phases.verify(state, context, draft)
    clock.mark()
    verdict, p_shown, q_shown = phases.accept(state, draft, target_logits)
    phases.roll_back(state, context, verdict)
    clock.mark()
    observe(state, context, draft, target_logits)
    clock.mark()
    event = phases.describe(draft, verdict, p_shown, q_shown, state.config)
    t1, t2, t3, t4, end = clock.seconds()  # after describe's read: the device is done, nothing waits
    return replace(event, draft_s=t1 + t4 - t3, verify_s=t2 - t1, overhead_s=end - t4 + t3 - t2)


def observe(state: Decoding, context: list[int], draft: Draft | TreeDraft, target_logits) -> None:
    """Hand the verification's logits to a drafter that learns from them (token recycling)."""
    learn = getattr(state.drafter, "observe", None)
    if learn is not None:
        drafted = list(draft.tree.tokens) if isinstance(draft, TreeDraft) else list(draft.tokens)
        learn([context[-1]] + drafted, target_logits)


def speculative_step(state: Decoding, context: list[int], k: int, reach: int | None = None) -> StepEvent:
    """Draft k tokens, verify them in one target forward, accept, and roll the target back.
    k = 0 is a plain autoregressive step. reach: a drafter that sets its own lengths (the hybrid:
    a long copied span speculates past the draft model's γ) may propose up to this many."""
    phases = CHAIN_PHASES if reach is None else replace(CHAIN_PHASES, draft=partial(draft_tokens, reach=reach))
    return timed_step(state, context, k, phases)


def tree_step(state: Decoding, context: list[int], max_depth: int) -> StepEvent:
    """Draft a token tree, verify every node in one target forward (tree attention mask), keep
    exactly the accepted root path in the target's cache."""
    return timed_step(state, context, max_depth, TREE_PHASES)


def propose(state: Decoding, context: list[int], k: int) -> Draft | TreeDraft:
    """Draft: the drafter's proposal after context, k tokens of a chain or k levels of a tree."""
    drafter, config = state.drafter, state.config
    generator = state.generators.on(drafter.device) if drafter.device is not None else None
    return drafter.propose(context, k, config.sampling, generator, config.min_confidence, state.eos)


# -- a chain ------------------------------------------------------------------------------------


def draft_tokens(state: Decoding, context: list[int], k: int, reach: int | None = None) -> Draft:
    """Draft: up to k tokens (none when k is 0), or up to `reach` for a drafter that may pass k."""
    if k <= 0:
        return Draft([], None)
    draft, most = propose(state, context, k), k if reach is None else reach
    return replace(draft, tokens=draft.tokens[:most], q=None if draft.q is None else draft.q[:most])


def verify(state: Decoding, context: list[int], draft: Draft) -> torch.Tensor:
    """Verify: one target forward over every drafted token, and one row more for the token after
    them, at the target's whole width (p is never cut to the draft's).  -> [len(draft) + 1, V] logits"""
    return state.lm.logits_for(context + draft.tokens, keep=len(draft.tokens) + 1)


def accept(state: Decoding, draft: Draft, target_logits) -> tuple[Verdict, torch.Tensor, torch.Tensor]:
    """Accept or reject the draft; returns the verdict and the p and q rows a viewer is shown."""
    sampling, device = state.config.sampling, target_logits.device
    tokens = torch.tensor(draft.tokens, device=device, dtype=torch.long)
    q = one_hot_q(tokens, target_logits.shape[-1]) if draft.q is None else draft.q.to(device)
    target_logits, q = common_width(target_logits, q)
    if sampling.greedy:
        return greedy_verify(draft.tokens, target_logits), display_probs(target_logits, sampling), q
    p = logits_to_probs(target_logits, sampling)
    return speculative_verify(tokens, q, p, state.generators.on(device)), p, q


def roll_back(state: Decoding, context: list[int], verdict: Verdict) -> None:
    """Roll back: keep the context and the accepted drafts in the target's cache."""
    state.lm.rollback(len(context) + verdict.n_accepted)


def one_hot_q(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """q of a deterministic drafter: all mass on the proposed token.  [k] -> [k, V]"""
    return torch.nn.functional.one_hot(tokens, vocab).float()


# -- a tree: the same four steps over every node ----------------------------------------------


def verify_tree(state: Decoding, context: list[int], draft: TreeDraft) -> torch.Tensor:
    """Verify: one target forward over every node, each seeing only its ancestors.
    -> [nodes + 1, V] logits at the target's whole width: row 0 after the context, row i+1 after node i"""
    return state.lm.logits_for_tree(context, draft.tree)


def accept_tree(state: Decoding, draft: TreeDraft,
                target_logits) -> tuple[TreeVerdict, torch.Tensor, torch.Tensor]:
    """Greedy or SpecInfer acceptance over the tree; returns the p and q rows a viewer is shown."""
    sampling, device = state.config.sampling, target_logits.device
    q = None if draft.q is None else draft.q.to(device)
    if q is not None:
        target_logits, q = common_width(target_logits, q)
    shown = candidate_rows(draft.tree, target_logits.shape[-1], device) if q is None else q
    if sampling.greedy:
        return greedy_tree_verify(draft.tree, target_logits), display_probs(target_logits, sampling), shown
    p = logits_to_probs(target_logits, sampling)
    return sampled_tree_verify(draft.tree, q, p, state.generators.on(device)), p, shown


def keep_path(state: Decoding, context: list[int], verdict: TreeVerdict) -> None:
    """Roll back a tree: keep the context and the accepted root path, moved into place."""
    state.lm.keep_path(len(context), verdict.path)


CHAIN_PHASES = Phases(draft_tokens, verify, accept, roll_back, describe_step)
TREE_PHASES = Phases(propose, verify_tree, accept_tree, keep_path, describe_tree_step)


def next_gamma(gamma: int, drafted: int, accepted: int, low: int, high: int) -> int:
    """Adaptive lookahead (transformers' "heuristic" schedule): +2 after a full acceptance, -1 after a rejection."""
    return min(high, gamma + 2) if accepted == drafted else max(low, gamma - 1)


class Generators:
    """One torch.Generator per device, all seeded from the run's seed: reproducible, never global."""

    def __init__(self, seed: int):
        self.seed = seed
        self.by_device: dict[str, torch.Generator] = {}

    def on(self, device) -> torch.Generator:
        key = str(device)
        if key not in self.by_device:
            self.by_device[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self.by_device[key]
