"""What one target call did, as the StepEvent a viewer draws: the drafted tokens with their p, q
and fate, the token the target added, and for a tree every node. Pure bookkeeping over the
verdict and the probability rows; no model is called here.
"""

from __future__ import annotations

import torch

from playground.engine.drafters import Draft, TreeDraft
from playground.engine.events import (
    ACCEPTED,
    BONUS,
    REJECTED,
    RESAMPLED,
    TARGET,
    DraftToken,
    StepEvent,
    TreeNode,
    TreeRecord,
)
from playground.engine.sampling import Verdict
from playground.engine.tree import ROOT, TreeVerdict


def describe_step(draft: Draft, verdict: Verdict, p: torch.Tensor, q: torch.Tensor, config) -> StepEvent:
    """Turn one verification into the event a viewer draws. The loop fills in the step's place
    (index, the lookahead asked, what was emitted); here gamma is the drafts' count. config: the
    run's SpecConfig (`detail` top tokens are recorded). Every number shown comes to the host in
    one transfer (on a GPU each read waits for the device)."""
    n, k, detail = verdict.n_accepted, len(draft.tokens), config.detail
    source = verdict.residual if verdict.residual is not None else p[n]
    q_x, p_x, (next_p,) = read_at(p.device, [(q[:k], draft.tokens), (p[:k], draft.tokens),
                                             (source[None], [verdict.next_token])])
    drafts = tuple(
        DraftToken(
            token=x,
            q=q_x[i],
            p=p_x[i],
            accept_prob=verdict.accept_probs[i],
            uniform=verdict.uniforms[i] if i < len(verdict.uniforms) else None,
            fate=ACCEPTED if i < n else REJECTED,
            top_q=top_tokens(q[i], detail),
            top_p=top_tokens(p[i], detail),
        )
        for i, x in enumerate(draft.tokens)
    )
    return StepEvent(
        index=0,
        gamma=k,
        drafts=drafts,
        n_accepted=n,
        next_token=verdict.next_token,
        next_fate=TARGET if k == 0 else (BONUS if n == k else RESAMPLED),
        next_p=next_p,
        emitted=tuple(draft.tokens[:n]) + (verdict.next_token,),
        prompt_tokens=0,
        draft_s=0.0,
        verify_s=0.0,
        overhead_s=0.0,
        residual_top=top_tokens(verdict.residual, detail) if verdict.residual is not None else (),
        next_top=top_tokens(source, detail),
        source=draft.source,
        why=draft.why,
    )


def read_at(device, picks: list[tuple[torch.Tensor, list[int]]]) -> list[list[float]]:
    """rows[i, tokens[i]] of each (rows [m, V], tokens [m]) pick, all brought to the host in one
    transfer.  -> one list of m floats per pick"""
    gathered = [rows.gather(-1, torch.tensor(tokens, device=device, dtype=torch.long)[:, None])[:, 0].float()
                for rows, tokens in picks]
    flat = torch.cat(gathered).tolist() if gathered else []
    out, start = [], 0
    for _, tokens in picks:
        out.append(flat[start : start + len(tokens)])
        start += len(tokens)
    return out


def describe_tree_step(draft: TreeDraft, verdict: TreeVerdict, p: torch.Tensor, q: torch.Tensor,
                       config) -> StepEvent:
    """The event of a tree step: every node in `tree`, and one root path in `drafts` (the accepted
    nodes, then the deepest continuation) so folds over drafts count per depth like a chain. gamma
    is the tree's depth; the loop fills in the depth asked."""
    tree, path = draft.tree, verdict.path
    greedy, detail = config.sampling.greedy, config.detail
    last = (path[-1] if path else ROOT) + 1
    residual = verdict.resampled and not greedy
    shown = verdict.next_from.to(p.device) if residual else p[last]
    rows = [parent + 1 for parent in tree.parents]
    best = p.argmax(-1).tolist() if greedy else []
    p_xs, q_xs, (next_p,) = read_at(p.device, [(p[rows], list(tree.tokens)), (q[rows], list(tree.tokens)),
                                               (shown[None], [verdict.next_token])])
    nodes = []
    for i, (x, parent, d) in enumerate(zip(tree.tokens, tree.parents, tree.depths)):
        p_x, q_x = p_xs[i], q_xs[i]
        ratio = float(x == best[parent + 1]) if greedy else (min(1.0, p_x / q_x) if q_x > 0 else 0.0)
        nodes.append(TreeNode(x, parent, d, q_x, p_x, ratio, verdict.accept_probs[i], verdict.uniforms[i],
                              verdict.fates[i]))
    chain = path + deepest_continuation(tree, path[-1] if path else ROOT)
    drafts = tuple(
        DraftToken(
            token=nodes[i].token, q=nodes[i].q, p=nodes[i].p,
            accept_prob=nodes[i].accept_prob if nodes[i].accept_prob is not None else nodes[i].ratio,
            uniform=nodes[i].uniform, fate=ACCEPTED if i in path else REJECTED,
            top_q=top_tokens(q[tree.parents[i] + 1], detail),
            top_p=top_tokens(p[tree.parents[i] + 1], detail),
        )
        for i in chain
    )
    n = len(path)
    return StepEvent(
        index=0,
        gamma=max(tree.depths, default=0),
        drafts=drafts,
        n_accepted=n,
        next_token=verdict.next_token,
        next_fate=TARGET if not len(tree) else (RESAMPLED if verdict.resampled else BONUS),
        next_p=next_p,
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
