"""What the Your models tab shows: the scan as a table, the drafts for a target with their class and
estimate, the chosen pairing with its estimate (or what a race measured), and the kept pairs with
whether their models are still where they were kept. Pure functions of the scan, the pairings and the
registry: no Gradio, no model."""

from __future__ import annotations

import html

from playground.models.scan.listing import count, size, tokenizer_groups

SCAN_HEADERS = ["name", "source", "size", "quantization", "architecture", "parameters", "context", "vocab",
                "tokenizer group", "usable here / why not"]
DRAFT_HEADERS = ["draft", "class", "why", "c (bytes)", "α", "estimate ×", "at γ"]


def scan_rows(found) -> list[list]:
    if found is None:
        return []
    groups = tokenizer_groups(found.models)
    return [[m.name, m.source, size(m.bytes), m.quantization or "-", m.architecture or "-", count(m.parameters),
             count(m.context), count(m.vocab), groups.get(m.tokenizer, "-"), "yes" if m.usable else f"no: {m.why}"]
            for m in found.models]


def draft_rows(pairings: list, estimates: dict) -> list[list]:
    rows = []
    for p in pairings:
        e = estimates.get(p.draft)
        rows.append([p.draft, p.verdict, p.why, f"{p.c:.2f}" if p.c is not None else "-",
                     f"{p.alpha:.2f} ({f'models.yaml: {p.family}' if p.family else 'assumed'})"
                     if p.alpha is not None else "-",
                     f"{e.speedup:.2f}" if e else "-", e.gamma if e else "-"])
    return rows


def pairing_html(pairing, estimate, measured=None) -> str:
    """The pick's class and why; its estimate, said as one; a race's measured figures, which replace it."""
    if pairing is None:
        return "<p>Pick a target and a draft from the scan.</p>"
    head = (f"<p><b>{html.escape(pairing.draft)}</b> for <b>{html.escape(pairing.target)}</b>: "
            f"<b>{html.escape(pairing.verdict)}</b>, {html.escape(pairing.why)}.</p>")
    if not pairing.usable:
        return head
    if measured is not None:
        return head + (f"<p><b>Measured</b> on this machine (replaces the estimate): {measured.speedup:.2f}× at γ "
                       f"{measured.gamma}, α {measured.alpha:.2f}, c {measured.c:.2f}, verification "
                       f"{measured.verify_cost:.2f} plain steps.</p>"
                       f"<p style='color:var(--body-text-color-subdued)'>Before it ran: {html.escape(estimate.line())}."
                       "</p>")
    return head + f"<p><b>Estimate</b>, nothing loaded yet: {html.escape(estimate.line())}.</p>"


def runs_html(models, memory) -> str:
    """How each model of the pick runs here under auto on a CPU: ONNX Runtime's int4 build where its builder
    reads the architecture (Qwen2 and Llama GGUFs today; made once, its peak counted in the fit), else
    PyTorch (a GGUF dequantized on loading)."""
    if memory.device != "cpu":
        return ""
    said = [f"{html.escape(m.name)}: " + ("ONNX Runtime's int4 build, made once from its GGUF" if memory.build_peak(m)
                                          else "PyTorch" + (", its GGUF dequantized" if m.format == "gguf" else ""))
            for m in models]
    return f"<p style='color:var(--body-text-color-subdued)'>Runs here: {'; '.join(said)}.</p>"


def kept_html(registry, picks, status) -> str:
    """The user's kept pairs and the picks raced but not kept, each model's state (as kept, gone or
    changed); and what of user-pairs.yaml was not merged, and why. `status`: userpairs.status."""
    items = []
    for pair in registry.pairs.values():
        if not pair.kept and pair.name not in picks:
            continue
        models = [registry.models[pair.target], registry.models[pair.draft]]
        states = [f"{m.name}: {(status(m) or 'as kept') if m.kept else 'raced, not kept'}" for m in models]
        items.append(f"<li><b>{html.escape(pair.name)}</b> ({html.escape('; '.join(states))})</li>")
    problems = "".join(f"<li style='color:#b42318'>{html.escape(p)}</li>" for p in registry.user_problems)
    if not items and not problems:
        return "<p>No pairs kept yet: pick a target and a draft, then Keep this pair.</p>"
    return f"<p>Your pairs (user-pairs.yaml beside the cache):</p><ul>{''.join(items)}{problems}</ul>"
