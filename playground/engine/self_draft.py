"""Self-speculative decoding: the target drafts for itself by running only some of its layers.

Draft&Verify (Zhang et al. 2023), LayerSkip (Elhoushi et al. 2024) and SWIFT (Xia et al. 2024,
arXiv 2410.06916) draft with the target's own weights, skipping decoder layers. No second model
is loaded: the draft is a *view* of the target (its embeddings, the kept layers in order, its
final norm and head: the same tensors), with a KV cache of its own holding only the kept layers'
entries, so the skipped pass never writes into the target's cache.

Which layers to keep is SWIFT's question. SWIFT answers it on the fly, per input: it proposes
layer sets (random search, with Bayesian optimisation every few tries) and scores each by
*matchness*, the share of the context's next tokens the skipping model predicts, in one parallel
forward. Ours is the same idea made small and deterministic: at the start of each prompt, a few
candidate sets (the early-exit set, seeded random sets, then single-layer swaps around the best so
far) are scored by how many of the target's own greedy next tokens over the prompt's last
positions the view reproduces under teacher forcing; the best is kept. The search runs inside the
first proposal, so its time is counted as drafting time. Layer 0 is always kept, as SWIFT always
keeps the first layer (it turns embeddings into what every later layer expects; the view also
reads its cache's length off layer 0's entries).

Verification is untouched: q is the view's processed distribution, exactly as a draft model's
(the chain ModelDrafter, or the TreeDrafter for a token tree, drives the view), so Algorithm 1, or
SpecInfer's tree verification, keeps the output exact.
"""

from __future__ import annotations

import copy
import random
from collections import OrderedDict
from dataclasses import dataclass

import torch

from playground.config import CHAIN, KNOBS, TREE, KnobError, check_int, check_value
from playground.engine.drafters import Draft, ModelDrafter, TreeDraft
from playground.engine.memory import cache_bytes
from playground.engine.runners import COMPILED, EAGER, LLAMACPP, ONNXRUNTIME, STATIC, module_of, resolve

WHOLE_GRAPH = (LLAMACPP, ONNXRUNTIME)  # run a whole GGUF / ONNX graph: no layer can be skipped there
SEARCH_BUDGET = 8  # layer sets scored per prompt, the early-exit one included
SCORE_WINDOW = 64  # prompt positions scored: the last ones, nearest where drafting starts
VIEWS_KEPT = 8  # drafting views kept on a target for reuse (their static caches and compiled steps with them)


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder's list of layers (transformers names it `layers` in every decoder-only LM we run)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"target must be a decoder-only LM with a `layers` list, got {type(model).__name__}")
    return layers


def num_layers(model) -> int:
    return len(decoder_layers(model))


def early_exit_layers(total: int, kept: int) -> tuple[int, ...]:
    """The fixed subset: the first `kept` layers (LayerSkip's early exit). Tried against the first
    kept - 1 and the last: on Qwen2.5-Coder-0.5B (24 layers, two prompts, scored on the target's
    own 48-token greedy continuation) the first 18 matched 0.42 and 0.25 of its tokens, the first 17
    and the last 0.23 and 0.25; at 12 layers both were near 0. On the tiny random models they tie
    (their layers barely move the output). Either way the search below does far better (0.71, 0.58)."""
    return tuple(range(kept))


def other_fixed_layers(total: int, kept: int) -> tuple[int, ...]:
    """The other fixed guess, the first kept - 1 layers and the last: the search scores it too."""
    return tuple(range(kept - 1)) + (total - 1,) if kept > 1 else (0,)


def check_layers(layers, total: int) -> tuple[int, ...]:
    """layers: distinct layer indices in [0, total - 1], 0 among them, fewer than all; sorted."""
    if not isinstance(layers, (tuple, list)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                        for i in layers):
        raise KnobError("layers", f"layers must be a tuple of layer indices in [0, {total - 1}], got {layers!r}")
    kept = tuple(sorted(set(layers)))
    if len(kept) != len(layers) or not kept or kept[0] != 0 or kept[-1] > total - 1 or len(kept) >= total:
        raise KnobError("layers", f"layers must be distinct indices in [0, {total - 1}], include 0 (the first "
                                  f"layer is always kept) and skip at least one, got {tuple(layers)!r}")
    return kept


def layer_skip_view(target, layers: tuple[int, ...]):
    """The target running only `layers` (in order): a model of the target's class whose embeddings,
    kept layers, final norm and head are the target's own modules. Nothing is copied.

    Its config is the target's (a copy), so a cache made for it has a slot for every layer, indexed
    by each attention module's own `layer_idx`: the skipped layers' slots simply stay empty."""
    blocks, text = decoder_layers(target), target.config.get_text_config()
    types = set(getattr(text, "layer_types", None) or ["full_attention"])
    if len(types) > 1:  # the decoder picks each layer's mask by its position in the list, not its index
        raise ValueError(f"target must use one attention type in every layer to skip layers, got {sorted(types)}")
    with torch.device("meta"):  # a skeleton without storage; every module is replaced by the target's below
        view = type(target)(copy.deepcopy(target.config))
    decoder, own = view.get_decoder(), target.get_decoder()
    for name, child in own.named_children():
        setattr(decoder, name, torch.nn.ModuleList(blocks[i] for i in layers) if name == "layers" else child)
    for name, child in target.named_children():
        if child is not own:
            setattr(view, name, child)
    shared = {t.data_ptr() for t in list(target.parameters()) + list(target.buffers())}
    if any(t.is_meta or t.data_ptr() not in shared for t in list(view.parameters()) + list(view.buffers())):
        raise ValueError(f"target: {type(target).__name__} keeps modules outside its decoder and head; "
                         "a layer-skipping view cannot share them")
    return view.eval()


class Views(OrderedDict):
    """A target's drafting views by layer set, least recently used first. Kept on the target (they
    live and die with it; no global registry), so the next drafter with the same layers reuses the
    view and whatever a runner keeps on it (a static cache pool, compiled steps). A copy of the
    target starts with none: views belong to the modules they share."""

    def __deepcopy__(self, memo) -> Views:
        return Views()

    def __reduce__(self):
        return (Views, ())


def view_of(target, layers: tuple[int, ...]):
    """The target's view over `layers`, made once and kept (the VIEWS_KEPT most recent)."""
    views = target.__dict__.setdefault("_playground_views", Views())
    if layers in views:
        views.move_to_end(layers)
        return views[layers]
    view = views[layers] = layer_skip_view(target, layers)
    while len(views) > VIEWS_KEPT:
        views.popitem(last=False)
    return view


# -- on-the-fly layer selection (SWIFT's optimisation phase, small) -----------------------------


@dataclass(frozen=True)
class Search:
    """What one layer search tried: (layers, matchness) in the order scored; the best is chosen."""

    tried: tuple[tuple[tuple[int, ...], float], ...]

    @property
    def best(self) -> tuple[tuple[int, ...], float]:
        return max(self.tried, key=lambda t: t[1])  # the first of equals: the starting set wins ties


@torch.inference_mode()
def greedy_next_tokens(model, prompt: list[int], window: int) -> torch.Tensor:
    """The model's argmax after each of the prompt's last `window` positions (teacher forcing). -> [w]"""
    ids = torch.tensor([prompt], device=model.device)
    return model(input_ids=ids, use_cache=False, logits_to_keep=min(window, len(prompt))).logits[0].argmax(-1)


def matchness(view, prompt: list[int], expected: torch.Tensor) -> float:
    """SWIFT's score: the share of positions where the view's greedy token is the target's."""
    return float((greedy_next_tokens(view, prompt, len(expected)) == expected).float().mean())


def swaps(layers: tuple[int, ...], total: int) -> list[tuple[int, ...]]:
    """Every set one kept layer (never layer 0) away: the greedy step of the search."""
    skipped = [i for i in range(1, total) if i not in layers]
    return [tuple(sorted(set(layers) - {out} | {inn})) for out in layers[1:] for inn in skipped]


def random_layers(rng: random.Random, total: int, kept: int) -> tuple[int, ...]:
    return (0,) + tuple(sorted(rng.sample(range(1, total), kept - 1)))


def search_layers(target, prompt: list[int], start: tuple[int, ...], budget: int = SEARCH_BUDGET,
                  window: int = SCORE_WINDOW, seed: int = 0) -> Search:
    """Score `start` and the other fixed guess, then budget // 2 - 1 seeded random sets, then swaps
    around the best so far: at most `budget` distinct sets in all. Stops early on a perfect score or
    where no swap is left to try (a small model's whole space may be fewer sets than the budget)."""
    total, kept = num_layers(target), len(start)
    expected = greedy_next_tokens(target, prompt, window)
    rng, scores = random.Random(seed), {}

    def score(layers):
        scores[layers] = matchness(layer_skip_view(target, layers), prompt, expected)

    score(start)
    if len(scores) < budget and other_fixed_layers(total, kept) not in scores:
        score(other_fixed_layers(total, kept))
    for _ in range(budget // 2 - 1):
        candidate = random_layers(rng, total, kept)
        if candidate not in scores and len(scores) < budget:
            score(candidate)
    while len(scores) < budget and max(scores.values()) < 1.0:
        best = max(scores, key=scores.get)
        fresh = [c for c in swaps(best, total) if c not in scores]
        if not fresh:
            break
        score(fresh[rng.randrange(len(fresh))])
    return Search(tuple(scores.items()))


@dataclass(frozen=True)
class LayerSearch:
    """How a self draft looks for its layers at each prompt (search_layers): sets scored, prompt
    positions each is scored on, the seed of the random sets. One value, so the drafter takes the
    search as one setting beside its layers, runner and shape."""

    budget: int = SEARCH_BUDGET
    window: int = SCORE_WINDOW
    seed: int = 0

    def __post_init__(self):
        check_int("budget", self.budget, low=1, high=1000)
        check_int("window", self.window, low=1, high=1_000_000)


# -- the drafter ----------------------------------------------------------------------------------


def self_draft_runner(name: str, device) -> str:
    """The runner the view's cache lives on. llama.cpp and onnxruntime run a whole GGUF or ONNX graph
    (no layer can be left out), so where the target runs on one, named or chosen by auto, the view
    drafts on eager: the target still verifies on its own runner, as the plain run decodes."""
    kind = resolve(name, device)  # checks the name
    return EAGER if kind in WHOLE_GRAPH else kind


class SelfDrafter:
    """The target drafting for itself through a layer-skipping view (a chain or a token tree; q the
    view's processed distribution). `layers` are the layers that ran, chosen per prompt when `search` is on."""

    name = "self draft"

    def __init__(self, target, kept_layers: int | None = None, layers: tuple[int, ...] | None = None,
                 search: LayerSearch | None = LayerSearch(), runner: str = "auto",
                 draft_vocab: int | None = None, speculation: str = CHAIN, tree: dict | None = None):
        """kept_layers: how many layers draft (default: half, as SWIFT skips about half); layers: the
        set to start from (default the early-exit set); search: how to look for a better set of the
        same size at each prompt's first proposal (None: keep the starting set); speculation: chain
        or tree, and tree: the TreeDrafter's shape (budget, depth, branching, width; the knobs' defaults)."""
        check_value(KNOBS["speculation"], speculation)
        # a model kept as its files (a handle, which the target's own runner may run as an ONNX or GGUF
        # graph) drafts through its PyTorch form: only that form has layers to leave out
        target = module_of(target)
        total = num_layers(target)
        if layers is not None:
            layers = check_layers(layers, total)
        kept_layers = kept_layers if kept_layers is not None else len(layers) if layers else max(1, total // 2)
        check_int("kept_layers", kept_layers, low=1, high=total - 1)
        if layers is not None and len(layers) != kept_layers:
            raise KnobError("layers", f"layers must be kept_layers={kept_layers} layer indices, "
                                      f"got {len(layers)}: {layers!r}")
        self.target, self.search = target, search
        self.total_layers = total
        self.runner, self.draft_vocab = self_draft_runner(runner, target.device), draft_vocab
        self.start = layers or early_exit_layers(total, kept_layers)
        self.speculation, self.tree = speculation, dict(tree or {})
        self.vocab_size = target.config.get_text_config().vocab_size
        self.device = target.device
        self.searched: Search | None = None  # the last prompt's search, for whoever shows it
        self.pending: list[int] | None = None  # a prompt whose layers are still to be chosen
        self.use(self.start)

    def use(self, layers: tuple[int, ...]) -> None:
        """Draft with `layers` from now on: a view and a chain or tree drafter (its own cache) over it."""
        from playground.engine.tree_drafter import TreeDrafter

        self.layers, view = layers, view_of(self.target, layers)
        if self.speculation == TREE:
            self.drafter = TreeDrafter(view, vocab_size=self.vocab_size, draft_vocab=self.draft_vocab,
                                       runner=self.runner, **self.tree)
        else:
            self.drafter = ModelDrafter(view, self.vocab_size, draft_vocab=self.draft_vocab, runner=self.runner)

    @property
    def depth(self) -> int | None:
        """A tree's levels, as the engine reads them: the tree drafter's own."""
        return self.drafter.depth if self.speculation == TREE else None

    def begin(self, ids: list[int]) -> None:
        # searched in the first proposal, timed as drafting; one kept layer leaves one set: layer 0
        self.pending = list(ids) if self.search is not None and len(self.start) > 1 else None
        self.drafter.begin(ids)

    def propose(self, ids, k, sampling, generator, min_confidence=0.0,
                stop_tokens=frozenset()) -> Draft | TreeDraft:
        if self.pending is not None:
            self.select_layers(self.pending)
        return self.drafter.propose(ids, k, sampling, generator, min_confidence, stop_tokens)

    def select_layers(self, prompt: list[int]) -> None:
        """SWIFT's optimisation phase, once per prompt: the best-matching set drafts from here on."""
        self.pending = None
        plan = self.search
        self.searched = search_layers(self.target, prompt, self.start, plan.budget, plan.window, plan.seed)
        layers, _ = self.searched.best
        if layers != self.layers:
            self.use(layers)

    def resident_bytes(self) -> int:
        """Memory the self draft adds to the target's: its cache only (every weight is the target's)."""
        return cache_bytes(self.drafter.lm.cache)
