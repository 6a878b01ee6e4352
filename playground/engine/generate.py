"""The speculative decoding loop at batch size 1: draft, verify, accept, roll back.

`generate` yields one StepEvent per target call and never prints. With no drafter the same loop
is plain autoregressive decoding, so a baseline and a speculative run differ only in speculation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch

from playground.engine.drafters import Draft, Drafter
from playground.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, TARGET, DraftToken, StepEvent, TreeNode, TreeRecord
from playground.engine.kvcache import CachedModel
from playground.engine.sampling import (
    Sampling,
    Verdict,
    check_int,
    display_probs,
    greedy_verify,
    logits_to_probs,
    speculative_verify,
)
from playground.engine.tree import ROOT, TreeVerdict, greedy_tree_verify, sampled_tree_verify

from playground.config import MAX_GAMMA, check, defaults  # noqa: F401  (MAX_GAMMA: the engine's bound, declared there)

D = defaults()


@dataclass(frozen=True)
class SpecConfig:
    """The decoding knobs of a run (RunConfig's "decoding" group: defaults and ranges declared
    there, once) and the engine-only options. Validated on creation; errors name the field."""

    gamma: int = D["gamma"]  # lookahead: tokens drafted per target call (the start value when adaptive)
    adaptive: bool = D["adaptive"]  # grow gamma by 2 after a full acceptance, shrink by 1 after a rejection
    gamma_min: int = D["gamma_min"]  # bounds of the adaptive schedule
    gamma_max: int = D["gamma_max"]
    min_confidence: float = D["min_confidence"]  # stop drafting when the draft's top probability is lower
    temperature: float = D["temperature"]  # 0 is greedy
    top_k: int = D["top_k"]  # 0 is off
    top_p: float = D["top_p"]  # 1 is off
    seed: int = D["seed"]  # seeds the run's own generators; nothing global is reseeded
    max_new_tokens: int = D["max_new_tokens"]
    runner: str = D["runner"]  # how the target's forwards run (engine/runners); a drafter has its own
    stop_strings: tuple[str, ...] = ()
    detail: int = 0  # record the top-`detail` tokens of p, q and the residual in each event
    sampling: Sampling = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        check(self)
        check_int("detail", self.detail, low=0, high=1000)
        if not isinstance(self.stop_strings, (tuple, list)) or not all(
            isinstance(s, str) and s for s in self.stop_strings
        ):
            raise ValueError(f"stop_strings must be a list of non-empty strings, got {self.stop_strings!r}")
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        object.__setattr__(self, "sampling", Sampling(self.temperature, self.top_k, self.top_p))


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
    lm = CachedModel(target, runner=config.runner)
    vocab = min(lm.vocab_size, drafter.vocab_size or lm.vocab_size) if drafter else lm.vocab_size
    generators = Generators(config.seed)
    begin(lm, drafter, prompt_ids)
    context, gamma, produced, index = list(prompt_ids), config.gamma, 0, 0
    eos = frozenset(eos_token_ids)
    while True:
        k = min(gamma, config.max_new_tokens - produced - 1) if drafter else 0
        if getattr(drafter, "is_tree", False) and config.max_new_tokens - produced > 1:
            event = tree_step(lm, drafter, context, config.max_new_tokens - produced - 1, vocab, config,
                              generators, index, eos)
        else:
            k = 0 if getattr(drafter, "is_tree", False) else k
            event = speculative_step(lm, drafter, context, k, gamma, vocab, config, generators, index, eos)
        emitted, finish = cut_output(event, context, produced, config, eos, tokenizer)
        event = replace(event, emitted=emitted, finish=finish, prompt_tokens=len(prompt_ids) if index == 0 else 0)
        context += emitted
        produced += len(emitted)
        yield event
        if finish:
            return
        if config.adaptive and event.drafts:
            gamma = next_gamma(gamma, len(event.drafts), event.n_accepted, config.gamma_min, config.gamma_max)
        index += 1


def check_inputs(target, prompt_ids, config, drafter, tokenizer) -> None:
    if not prompt_ids:
        raise ValueError("prompt must contain at least one token, got an empty prompt")
    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a SpecConfig, got {type(config).__name__}")
    if config.stop_strings and tokenizer is None:
        raise ValueError("stop_strings need the tokenizer: pass tokenizer=")
    problem = context_problem(target, prompt_ids, config)
    if problem:
        raise ValueError(problem)


def context_problem(target, prompt_ids, config) -> str | None:
    """Why this prompt and max_new_tokens do not fit the target's context, or None. The one check:
    a run refuses such a prompt with it, and the benchmark skips such a prompt with it."""
    limit = getattr(target.config.get_text_config(), "max_position_embeddings", None)
    if limit and len(prompt_ids) >= limit:
        return f"prompt is {len(prompt_ids)} tokens, but the target's context holds {limit}"
    if limit and len(prompt_ids) + config.max_new_tokens > limit:
        room = limit - len(prompt_ids)
        return (f"max_new_tokens must be at most {room} for this {len(prompt_ids)}-token prompt "
                f"(the target's context holds {limit}), got {config.max_new_tokens}")
    return None


def begin(lm: CachedModel, drafter: Drafter | None, prompt_ids: list[int]) -> None:
    """Start a prompt with empty caches. There is no separate prefill call: the first step's
    target forward reads the prompt together with the first draft (and the draft model reads it
    in its first proposal), which saves one forward of each model per generation."""
    lm.reset()
    if drafter is not None:
        drafter.begin(prompt_ids)


def speculative_step(lm, drafter, context, k, gamma, vocab, config, generators, index, eos=frozenset()) -> StepEvent:
    """Draft k tokens, verify them in one target forward, accept, and roll the target back."""
    t0 = clock(lm.device)
    draft = draft_tokens(drafter, context, k, config, generators, eos)
    t1 = clock(lm.device)
    target_logits = lm.logits_for(context + draft.tokens, keep=len(draft.tokens) + 1)[:, :vocab]
    t2 = clock(lm.device)
    verdict, p_shown, q_shown = verify(draft, target_logits, vocab, config.sampling, generators)
    lm.rollback(len(context) + verdict.n_accepted)
    event = describe_step(index, gamma, draft, verdict, p_shown, q_shown, config.detail)
    t3 = clock(lm.device)
    return replace(event, draft_s=t1 - t0, verify_s=t2 - t1, overhead_s=t3 - t2)


def draft_tokens(drafter, context, k, config, generators, eos=frozenset()) -> Draft:
    if k <= 0:
        return Draft([], None)
    device = getattr(drafter, "device", None)
    gen = generators.on(device) if device is not None else None
    draft = drafter.propose(context, k, config.sampling, gen, config.min_confidence, eos)
    return Draft(draft.tokens[:k], None if draft.q is None else draft.q[:k])


def verify(draft: Draft, target_logits, vocab, sampling: Sampling, generators) -> tuple[Verdict, torch.Tensor, torch.Tensor]:
    """Accept or reject the draft; returns the verdict and the p and q rows a viewer is shown."""
    device = target_logits.device
    tokens = torch.tensor(draft.tokens, device=device, dtype=torch.long)
    q = one_hot_q(tokens, vocab) if draft.q is None else draft.q[:, :vocab].to(device)
    if sampling.greedy:
        return greedy_verify(tokens, target_logits), display_probs(target_logits, sampling), q
    p = logits_to_probs(target_logits, sampling)
    return speculative_verify(tokens, q, p, generators.on(device)), p, q


def one_hot_q(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """q of a deterministic drafter: all mass on the proposed token.  [k] -> [k, V]"""
    return torch.nn.functional.one_hot(tokens, vocab).float()


def describe_step(index, gamma, draft, verdict, p, q, detail) -> StepEvent:
    """Turn one verification into the event a viewer draws."""
    n, k = verdict.n_accepted, len(draft.tokens)
    drafts = tuple(
        DraftToken(
            token=x,
            q=float(q[i, x]),
            p=float(p[i, x]),
            accept_prob=verdict.accept_probs[i],
            uniform=verdict.uniforms[i] if i < len(verdict.uniforms) else None,
            fate=ACCEPTED if i < n else REJECTED,
            top_q=top_tokens(q[i], detail),
            top_p=top_tokens(p[i], detail),
        )
        for i, x in enumerate(draft.tokens)
    )
    source = verdict.residual if verdict.residual is not None else p[n]
    return StepEvent(
        index=index,
        gamma=gamma,
        drafts=drafts,
        n_accepted=n,
        next_token=verdict.next_token,
        next_fate=TARGET if k == 0 else (BONUS if n == k else RESAMPLED),
        next_p=float(source[verdict.next_token]),
        emitted=tuple(draft.tokens[:n]) + (verdict.next_token,),
        prompt_tokens=0,
        draft_s=0.0,
        verify_s=0.0,
        overhead_s=0.0,
        residual_top=top_tokens(verdict.residual, detail) if verdict.residual is not None else (),
        next_top=top_tokens(source, detail),
    )


def tree_step(lm, drafter, context, max_depth, vocab, config, generators, index, eos=frozenset()) -> StepEvent:
    """Draft a token tree, verify every node in one target forward (tree attention mask), keep
    exactly the accepted root path in the target's cache."""
    t0 = clock(lm.device)
    draft = drafter.propose_tree(context, max_depth, config.sampling, generators.on(drafter.device), eos)
    t1 = clock(lm.device)
    target_logits = lm.logits_for_tree(context, draft.tree)[:, :vocab]
    t2 = clock(lm.device)
    verdict, p_shown, q_shown = verify_tree(draft, target_logits, vocab, config.sampling, generators)
    lm.keep_path(len(context), verdict.path)
    event = describe_tree_step(index, drafter.depth, draft, verdict, p_shown, q_shown, config.sampling.greedy,
                               config.detail)
    t3 = clock(lm.device)
    return replace(event, draft_s=t1 - t0, verify_s=t2 - t1, overhead_s=t3 - t2)


def verify_tree(draft, target_logits, vocab, sampling: Sampling, generators) -> tuple[TreeVerdict, torch.Tensor, torch.Tensor]:
    """Greedy or SpecInfer verification of the tree; returns the p and q rows a viewer is shown."""
    device = target_logits.device
    q = draft.q[:, :vocab].to(device)
    if sampling.greedy:
        return greedy_tree_verify(draft.tree, target_logits), display_probs(target_logits, sampling), q
    p = logits_to_probs(target_logits, sampling)
    return sampled_tree_verify(draft.tree, q, p, generators.on(device)), p, q


def describe_tree_step(index, depth, draft, verdict: TreeVerdict, p, q, greedy, detail) -> StepEvent:
    """The event of a tree step: every node in `tree`, and one root path in `drafts` (the accepted
    nodes, then the deepest continuation) so folds over drafts count per depth like a chain."""
    tree, path = draft.tree, verdict.path
    best = p.argmax(-1).tolist()
    nodes = []
    for i, (x, parent, d) in enumerate(zip(tree.tokens, tree.parents, tree.depths)):
        p_x, q_x = float(p[parent + 1, x]), float(q[parent + 1, x])
        ratio = float(x == best[parent + 1]) if greedy else (min(1.0, p_x / q_x) if q_x > 0 else 0.0)
        nodes.append(TreeNode(x, parent, d, q_x, p_x, ratio, verdict.accept_probs[i], verdict.uniforms[i],
                              verdict.fates[i]))
    chain = path + deepest_continuation(tree, path[-1] if path else ROOT)
    drafts = tuple(
        DraftToken(
            token=nodes[i].token, q=nodes[i].q, p=nodes[i].p,
            accept_prob=nodes[i].accept_prob if nodes[i].accept_prob is not None else nodes[i].ratio,
            uniform=nodes[i].uniform, fate=ACCEPTED if i in path else REJECTED,
            top_q=top_tokens(q[tree.parents[i] + 1], detail), top_p=top_tokens(p[tree.parents[i] + 1], detail),
        )
        for i in chain
    )
    last = (path[-1] if path else ROOT) + 1
    residual = verdict.resampled and not greedy
    shown = verdict.next_from if residual else p[last]
    n = len(path)
    return StepEvent(
        index=index,
        gamma=depth,
        drafts=drafts,
        n_accepted=n,
        next_token=verdict.next_token,
        next_fate=TARGET if not len(tree) else (RESAMPLED if verdict.resampled else BONUS),
        next_p=float(shown[verdict.next_token]),
        emitted=tuple(tree.tokens[i] for i in path) + (verdict.next_token,),
        prompt_tokens=0,
        draft_s=0.0,
        verify_s=0.0,
        overhead_s=0.0,
        residual_top=top_tokens(verdict.next_from, detail) if residual else (),
        next_top=top_tokens(shown, detail),
        tree=TreeRecord(tuple(nodes), tuple(path), draft.forwards),
    )


def deepest_continuation(tree, node: int) -> list[int]:
    """Below node, the root path to its deepest descendant (first child on ties)."""
    height = [0] * len(tree)
    for i in range(len(tree) - 1, -1, -1):  # children come after their parent
        if tree.parents[i] != ROOT:
            height[tree.parents[i]] = max(height[tree.parents[i]], height[i] + 1)
    out = []
    while kids := tree.children(node):
        node = max(kids, key=lambda c: (height[c], -c))
        out.append(node)
    return out


def top_tokens(probs: torch.Tensor, n: int) -> tuple[tuple[int, float], ...]:
    if n <= 0:
        return ()
    values, ids = torch.topk(probs.float(), min(n, probs.shape[-1]))
    return tuple(zip(ids.tolist(), values.tolist()))


def cut_output(event, context, produced, config, eos, tokenizer) -> tuple[tuple[int, ...], str | None]:
    """Emit the step's tokens up to EOS, a stop string or the token budget, whichever comes first."""
    out: list[int] = []
    for token in event.emitted:
        out.append(token)
        if token in eos:
            return tuple(out), "eos"
        if config.stop_strings and ends_with_stop(context + out, produced + len(out), config, tokenizer):
            return tuple(out), "stop"
        if produced + len(out) >= config.max_new_tokens:
            return tuple(out), "length"
    return tuple(out), None


def ends_with_stop(tokens, generated, config, tokenizer) -> bool:
    """Did the last token complete a stop string? Decodes a short tail only, not the whole text."""
    window = max(len(s) for s in config.stop_strings) + 8
    tail = tokenizer.decode(tokens[-min(window, generated):])
    return any(s in tail for s in config.stop_strings)


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


def clock(device) -> float:
    """Wall clock, after the device has finished its queued work (CUDA runs asynchronously)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
