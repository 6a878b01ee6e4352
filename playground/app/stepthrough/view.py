"""One speculative step as a page a newcomer can read: each stage (draft, verify, outcome) with a
plain-language note beside the numbers. Pure functions of a StepEvent (no Gradio, no model);
every piece of token text is escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from playground.config import HYBRID, PROMPT_LOOKUP, RECYCLING, SELF, SUFFIX
from playground.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, TARGET, StepEvent
from playground.app.shared.render import render_spans

Label = Callable[[int], str]
SHOWN = 5  # rows of a residual or bonus distribution listed in the page

CSS = """
.steps { font-size: 14px; line-height: 1.45; }
.steps .head { font-size: 16px; font-weight: 700; margin: 2px 0 8px; }
.steps .stage { padding: 10px 0; border-top: 1px solid var(--border-color-primary); }
.steps .what b { font-size: 15px; }
.steps .what p { margin: 2px 0 6px; color: var(--body-text-color); opacity: .8; font-size: 13px; }
.steps .show table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px;
  border: none; }
.steps .show p { margin: 6px 0 0; }
.steps .show td, .steps .show th { padding: 2px 8px; text-align: right; white-space: nowrap;
  border: none; border-bottom: 1px solid var(--border-color-primary); }
.steps .show td:first-child, .steps .show th:first-child { text-align: left; }
.steps .chip { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; padding: 1px 5px;
  border-radius: 3px; white-space: pre; }
.steps .verdict.keep { color: #137333; font-weight: 600; }
.steps .verdict.drop { color: #b42318; font-weight: 600; }
.steps .verdict.skip { color: var(--body-text-color-subdued); }
.steps .picked td { font-weight: 700; background: rgba(245, 150, 20, .15); }
.steps .picked.bonus td { background: rgba(60, 110, 235, .15); }
.steps .tally { display: block; font-weight: 600; }
.race-text .st-context { color: var(--body-text-color-subdued); }
"""

DRAFT_NOTE = (
    "The small draft model guesses the next γ tokens, one after another. For each guess it notes q(x): "
    "how likely it found that token. Guessing is cheap, because the draft model is much smaller "
    "than the target."
)
LOOKUP_NOTE = (
    "Prompt lookup found the last few tokens earlier in the text and copies what followed them there. It "
    "has no probabilities, so its q puts all weight on its guess: q(x) = 1."
)
# What each drafter did in the Draft stage (the draft model's note is DRAFT_NOTE)
DRAFTER_NOTES = {
    PROMPT_LOOKUP: LOOKUP_NOTE,
    SUFFIX: "Suffix decoding found the longest end of the text that occurred before (in the prompt, this answer "
            "or an earlier run) and proposes what most often followed it there, for as many tokens as the match "
            "was long. No model ran: q(x) = 1 on each guess.",
    RECYCLING: "Token recycling looked up, for the last token, the successors the target itself ranked highest "
               "the last time it read that token (every verification records them), and chained them. No model "
               "ran: q(x) = 1 on each guess.",
    HYBRID: "Each step the hybrid weighs the suffixes' match at every length it reaches, the draft model at γ "
            "and no draft at all by the tokens each is expected to bring per second (α and the times measured "
            "in this run), and drafts from the best: a guess with q(x) = 1 came from the suffixes, one with "
            "q(x) < 1 from the draft model.",
}
VERIFY_NOTE = (
    "The big target model reads all the guesses in ONE forward pass and gets p(x), its own probability, "
    "at every position. A guess is kept with probability min(1, p/q): if the target likes it at least as "
    "much as the draft did, it is kept for sure; if the draft was over-confident, it is kept only in "
    "proportion. A random number u between 0 and 1 decides: keep when u < min(1, p/q). The first "
    "rejection ends the step; the guesses after it are thrown away unread."
)
GREEDY_VERIFY_NOTE = (
    "The big target model reads all the guesses in ONE forward pass. At temperature 0 both models simply "
    "pick their most likely token, so a guess is kept exactly when it is the target's own top choice "
    "(min(1, p/q) in the limit where p and q put all weight on one token). The first mismatch ends the "
    "step; the guesses after it are thrown away unread."
)
RESIDUAL_NOTE = (
    "After a rejection the target picks the replacement from the residual norm(max(0, p − q)): the part "
    "of its own distribution p that the draft under-covered. Tokens the draft over-proposed get less, "
    "tokens it missed get more, exactly enough that, over accepts and rejections together, every token "
    "comes out with probability p(x). That is why the output follows the target model exactly."
)
GREEDY_RESIDUAL_NOTE = (
    "At temperature 0 the replacement is simply the target's own top token at that position: the text is "
    "exactly what the target alone would have written."
)
BONUS_NOTE = (
    "Every guess was kept. The target's forward pass already computed p for the position after the last "
    "guess, so it adds one more token from p for free: γ + 1 tokens for a single target call."
)
PLAIN_NOTE = (
    "Nothing was drafted this time (prompt lookup found no earlier match, or the token budget is nearly "
    "used up), so the target decoded one token on its own: a plain step."
)


def step_html(event: StepEvent, label: Label, greedy: bool, note: str, step_no: int) -> str:
    """The whole step: a heading, then one row per stage (`note`: what the drafter did), then the tally."""
    if event.why:  # the hybrid chose this step's source: say which and why, before the drafter's note
        note = f"This step the hybrid drafted {event.why}. {note}"
    stages = [draft_stage(event, label, note)] if event.drafts else []
    if event.drafts:
        stages.append(verify_stage(event, label, greedy))
    stages.append(outcome_stage(event, label, greedy))
    head = f"Step {step_no}: one call of the target model (γ = {event.gamma})"
    return f'<div class="steps"><div class="head">{head}</div>{"".join(stages)}{tally(event)}</div>'


def stage(title: str, note: str, body: str) -> str:
    return (
        f'<div class="stage"><div class="what"><b>{title}</b><p>{html.escape(note)}</p></div>'
        f'<div class="show">{body}</div></div>'
    )


def chip(text: str, fate: str = "") -> str:
    return f'<span class="chip tok {fate}">{html.escape(text)}</span>'


def drafter_note(drafter: str, layers: tuple[int, ...] | None = None, total: int | None = None) -> str:
    """What the drafter did; for the target drafting for itself, which of its layers ran."""
    if drafter == SELF and layers:
        shown = ", ".join(map(str, layers))
        return (f"The target drafted for itself, running only its layers {shown} ({len(layers)} of {total}, "
                "chosen on the prompt's first tokens by how often they agree with the whole target) and "
                "skipping the rest: no second model. Its q(x) is what that shortened target gives.")
    return DRAFTER_NOTES.get(drafter, DRAFT_NOTE)


def draft_stage(event: StepEvent, label: Label, note: str) -> str:
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{chip(label(d.token), d.fate)}</td><td>{d.q:.3f}</td></tr>"
        for i, d in enumerate(event.drafts)
    )
    body = f"<table><tr><th>position</th><th>guess x</th><th>q(x)</th></tr>{rows}</table>"
    return stage(f"① Draft: {len(event.drafts)} guesses", note, body)


def verify_stage(event: StepEvent, label: Label, greedy: bool) -> str:
    head = (
        "<tr><th>guess x</th><th>q(x)</th><th>p(x)</th><th>target's top</th><th>verdict</th></tr>"
        if greedy
        else "<tr><th>guess x</th><th>q(x)</th><th>p(x)</th><th>min(1, p/q)</th><th>u</th>"
        "<th>verdict</th></tr>"
    )
    rows = "".join(verify_row(event, i, label, greedy) for i in range(len(event.drafts)))
    kept = event.n_accepted
    title = f"② Verify: {kept} of {len(event.drafts)} kept"
    body = f"<table>{head}{rows}</table><p>{html.escape(in_this_step(event, label, greedy))}</p>"
    return stage(title, GREEDY_VERIFY_NOTE if greedy else VERIFY_NOTE, body)


def in_this_step(event: StepEvent, label: Label, greedy: bool) -> str:
    """The decisive comparison of this step in one sentence, with its own numbers."""
    n, k = event.n_accepted, len(event.drafts)
    if n == k:
        if greedy:
            return "Every guess was the target's own top token, so all were kept."
        return (
            "Every guess passed: where the target liked a guess at least as much as the draft (p ≥ q) it was "
            "kept for sure; elsewhere u happened to fall below p/q."
        )
    d = event.drafts[n]
    dropped = k - n - 1
    after = (
        f", and the {dropped} guess{'es' if dropped != 1 else ''} after it {'are' if dropped != 1 else 'is'} "
        "dropped unread"
        if dropped
        else ""
    )
    if greedy:
        top = label(d.top_p[0][0]) if d.top_p else "another token"
        return f"“{label(d.token)}” is not the target's top token (“{top}”): rejected{after}."
    return (
        f"“{label(d.token)}”: the draft gave it q = {d.q:.3f} but the target only p = {d.p:.3f}, "
        "so it survives "
        f"with probability p/q = {d.accept_prob:.3f}. The random u = {d.uniform:.3f} is not below that: "
        f"rejected{after}."
    )


def verify_row(event: StepEvent, i: int, label: Label, greedy: bool) -> str:
    d = event.drafts[i]
    cells = [chip(label(d.token), d.fate), f"{d.q:.3f}", f"{d.p:.3f}"]
    if i > event.n_accepted:  # after the first rejection: never tested
        cells += [""] * (1 if greedy else 2) + ['<span class="verdict skip">not tested</span>']
    elif greedy:
        top = d.top_p[0][0] if d.top_p else None
        cells.append(chip(label(top)) if top is not None else "")
        cells.append(
            verdict(d.fate == ACCEPTED, "same token: keep" if d.fate == ACCEPTED else "differs: reject")
        )
    else:
        kept = d.fate == ACCEPTED
        sign = "<" if kept else "≥"
        cells += [
            f"{d.accept_prob:.3f}",
            f"{d.uniform:.3f}" if d.uniform is not None else "",
            verdict(kept, f"u {sign} {d.accept_prob:.3f}: {'keep' if kept else 'reject'}"),
        ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def verdict(kept: bool, text: str) -> str:
    return f'<span class="verdict {"keep" if kept else "drop"}">{html.escape(text)}</span>'


def outcome_stage(event: StepEvent, label: Label, greedy: bool) -> str:
    token = chip(label(event.next_token), event.next_fate)
    if event.next_fate == TARGET:
        note = f"The hybrid chose {event.why}." if event.why else PLAIN_NOTE
        return stage("Plain step", note, f"The target wrote {token}.")
    if event.next_fate == BONUS:
        table = distribution_table(event.next_top, event.next_token, label, "p(x), next position", BONUS)
        return stage("③ Bonus token", BONUS_NOTE, f"The target adds {token} from p.{table}")
    rejected = event.drafts[event.n_accepted]
    if greedy:
        return stage(
            "③ Replacement",
            GREEDY_RESIDUAL_NOTE,
            f"{chip(label(rejected.token), REJECTED)} is replaced by the target's top token {token}.",
        )
    table = distribution_table(
        event.residual_top, event.next_token, label, "residual norm(max(0, p − q))", RESAMPLED
    )
    gone = (
        f"<p>The rejected guess {chip(label(rejected.token), REJECTED)} has residual 0 (there p &lt; q), "
        "so it cannot come back.</p>"
    )
    return stage(
        "③ Residual",
        RESIDUAL_NOTE,
        f"The target samples {token} from the residual (probability {event.next_p:.3f}).{table}{gone}",
    )


def distribution_table(top, picked: int, label: Label, title: str, fate: str) -> str:
    rows = "".join(
        f'<tr class="{"picked " + fate if t == picked else ""}">'
        f"<td>{chip(label(t))}</td><td>{prob:.3f}</td></tr>"
        for t, prob in top[:SHOWN]
    )
    if picked not in [t for t, _ in top[:SHOWN]]:
        rows += f'<tr class="picked {fate}"><td>{chip(label(picked))}</td><td>(further down)</td></tr>'
    return f"<table><tr><th>token</th><th>{html.escape(title)}</th></tr>{rows}</table>"


def tally(event: StepEvent) -> str:
    n = len(event.emitted)
    kept = min(event.n_accepted, n)
    parts = (
        f"{kept} kept guess{'es' if kept != 1 else ''} + 1 from the target"
        if event.drafts
        else "1 from the target"
    )
    end = f" The run has finished ({event.finish})." if event.finish else ""
    return (
        f'<div class="stage tally">This target call produced {n} token{"s" if n != 1 else ""} '
        f"({parts}); plain decoding needs one call per token.{end}</div>"
    )


def text_html(context: str, spans, placeholder: str) -> str:
    """The text so far the user gave (greyed), then the new text coloured by fate, in one box."""
    box = render_spans(spans, placeholder if not context else "")
    if not context:
        return box
    opening = '<div class="race-text">'
    return box.replace(opening, f'{opening}<span class="st-context">{html.escape(context)}</span>', 1)


def intro_html() -> str:
    return (
        '<div class="steps"><div class="head">Press “Next step” to run one speculative step.</div>'
        f'<div class="stage"><div class="what"><b>① Draft</b><p>{html.escape(DRAFT_NOTE)}</p></div></div>'
        f'<div class="stage"><div class="what"><b>② Verify</b><p>{html.escape(VERIFY_NOTE)}</p></div></div>'
        f'<div class="stage"><div class="what"><b>③ Residual or bonus</b><p>{html.escape(RESIDUAL_NOTE)}</p>'
        "</div></div></div>"
    )
