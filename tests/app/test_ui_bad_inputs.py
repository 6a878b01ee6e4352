"""Every bad input answered: a table of bad values sent through the launched app's API (the gradio
client, the tiny pair) to every tab. Each is answered with a message naming the field and what is
allowed — never a traceback or a hang — and the next good request is served correctly. HTML in
prompts and in tokens is shown as text."""

from __future__ import annotations

import json
import math
import textwrap

import httpx
import pytest

from playground.config import RunConfig
from test_ui_client import args, client, url  # noqa: F401  (url is the launched app's fixture)

NAN = math.nan


def knobs(**changes) -> list:
    settings = RunConfig(pair="tiny", max_new_tokens=8)
    values = {**{n: getattr(settings, n) for n in RunConfig.names()}, **changes}
    return [values[n] for n in RunConfig.names()]


def raw(call):
    """Sent as raw JSON (gradio_client refuses to encode NaN; a browser's or a script's request may not)."""
    return ("raw", *call)


def race(prompt="hi", **changes):
    return "/race", [prompt, "", *knobs(**changes)]


def step(prompt="hi", **changes):
    return "/step", [prompt, "", *knobs(**changes)]


def lab(prompt="hi", pair="tiny", draws=20, temperature=1.0, top_k=0, top_p=1.0, seed=0):
    return "/lab", [prompt, pair, draws, temperature, top_k, top_p, seed]


def sweep(pair="tiny", gammas="1,2", drafters=("model",), temperatures="0", examples=("Code",),
          categories=(), per_category=1, tokens=6, repeats=1, seed=0):
    return "/sweep", [pair, gammas, list(drafters), temperatures, list(examples), list(categories), per_category,
                      tokens, repeats, seed]


def measure(prompt="hi", pair="tiny", drafter="model", temperature=0.0, gamma=4, tokens=8):
    return "/measure", [prompt, pair, drafter, temperature, gamma, tokens]


BAD = [
    # (label, request, what the answer must say)
    ("race: empty prompt", race(""), "prompt must be non-empty text"),
    ("race: whitespace prompt", race(" \n\t "), "prompt must be non-empty text"),
    ("race: 100,000-character prompt", race("x" * 100_000), "prompt is 100000 characters; at most"),
    ("race: NUL byte", race("a\x00b"), "prompt must not contain NUL"),
    ("race: lone surrogate", raw(race("a\ud800b")), "prompt must be valid Unicode text"),
    ("race: gamma 0", race(gamma=0), "gamma must be an integer in [1, 64], got 0"),
    ("race: gamma 10^6", race(gamma=10**6), "gamma must be an integer in [1, 64], got 1000000"),
    ("race: negative temperature", race(temperature=-0.5), "temperature must be"),
    ("race: NaN temperature", raw(race(temperature=NAN)), "temperature must be a number, got nan"),
    ("race: top-p 0", race(top_p=0), "top_p must be in (0.0, 1.0], got 0"),
    ("race: top-p 1.5", race(top_p=1.5), "top_p must be in (0.0, 1.0], got 1.5"),
    ("race: negative top-k", race(top_k=-1), "top_k must be"),
    ("race: max new tokens 0", race(max_new_tokens=0), "max_new_tokens must be an integer in [1, 4096], got 0"),
    ("race: beyond the context", race("y" * 1500, max_new_tokens=1000), "the target's context holds 2048"),
    ("race: n-gram min > max", race(drafter="prompt_lookup", ngram_min=4, ngram_max=2), "ngram"),
    ("race: negative draft vocabulary", race(draft_vocab=-1), "draft_vocab must be an integer in [0, 10000000], got -1"),
    ("race: draft vocabulary beyond the vocabulary", race(draft_vocab=10**6), "draft_vocab"),
    ("race: unknown pair", race(pair="nope"), "unknown pair 'nope'; known pairs:"),
    ("race: unknown drafter", race(drafter="oracle"), "drafter must be one of: model, prompt_lookup"),
    ("race: unknown quantization", race(target_quantization="fp8"), "target_quantization must be one of"),
    ("step: empty prompt", step(""), "prompt must be non-empty text"),
    ("step: NUL byte", step("\x00"), "prompt must not contain NUL"),
    ("step: gamma 0", step(gamma=0), "gamma must be an integer in [1, 64], got 0"),
    ("step: NaN temperature", raw(step(temperature=NAN)), "temperature must be a number, got nan"),
    ("step: unknown pair", step(pair="nope"), "unknown pair 'nope'"),
    ("lab: whitespace prompt", lab("   "), "prompt must be non-empty text"),
    ("lab: 0 draws", lab(draws=0), "N draws must be a whole number in [1, 20000], got 0"),
    ("lab: negative draws", lab(draws=-5), "N draws must be a whole number in [1, 20000], got -5"),
    ("lab: temperature 0", lab(temperature=0), "temperature must be above 0 for the lab"),
    ("lab: NaN temperature", raw(lab(temperature=NAN)), "temperature must be a number, got nan"),
    ("race: NaN top-p", raw(race(top_p=NAN)), "top_p must be a number, got nan"),
    ("lab: top-p 1.5", lab(top_p=1.5), "top_p must be in (0.0, 1.0], got 1.5"),
    ("lab: unknown pair", lab(pair="nope"), "unknown pair 'nope'"),
    ("sweep: no gamma", sweep(gammas=""), "γ values"),
    ("sweep: gamma 0", sweep(gammas="0,2"), "γ values"),
    ("sweep: negative temperature", sweep(temperatures="-1"), "temperatures"),
    ("sweep: no drafter", sweep(drafters=()), "drafter"),
    ("sweep: unknown pair", sweep(pair="nope"), "unknown pair 'nope'"),
    ("measure: unknown pair", measure(pair="nope"), "unknown pair 'nope'"),
    ("measure: gamma 0", measure(gamma=0), "gamma"),
    ("measure: negative temperature", measure(temperature=-1.0), "temperature"),
]
GOOD = {
    "/race": (race("fine"), lambda out: "Done" in out[-1]),
    "/step": (step("fine"), lambda out: "Step 1:" in out[-1]),
    "/lab": (lab("fine"), lambda out: "Done: 20 draws each way" in out[-1]),
    "/sweep": (sweep(gammas="1"), lambda out: "Done: 1 settings measured" in out[-1]),
    "/measure": (measure("fine"), lambda out: out[2] is not None),
}


def test_the_table_covers_every_tab_with_at_least_30_inputs():
    assert len(BAD) >= 30 and {call[-2] for _, call, _ in BAD} == set(GOOD)


@pytest.mark.parametrize("label, call, message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_answered_naming_the_field_and_the_next_request_is_served(url, label, call, message):
    *how, api, values = call
    c = client(url)
    if how:
        said = raw_error(url, api, values)
    else:
        with pytest.raises(Exception) as raised:
            c.predict(*values, api_name=api)
        said = str(raised.value)
    assert message in said, f"{label}: {said[:300]}"
    assert "Traceback" not in said and "/tmp/" not in said and "/root/" not in said
    (good_api, good_values), served = GOOD[api]
    assert served(c.predict(*good_values, api_name=good_api)), label


def raw_error(url: str, api: str, values: list) -> str:
    """POST the values as JSON (NaN included) to Gradio's HTTP API; the error event's message."""
    posted = httpx.post(f"{url}gradio_api/call{api}", content=json.dumps({"data": values}),
                        headers={"content-type": "application/json"}, timeout=60)
    posted.raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/call{api}/{posted.json()['event_id']}", timeout=120) as events:
        lines = [line for line in events.iter_lines()]
    for event, data in zip(lines, lines[1:]):
        if event == "event: error":
            return json.loads(data.removeprefix("data: "))["error"]
    raise AssertionError(f"no error event for {api}: {lines[-3:]}")


def test_html_in_prompts_and_tokens_is_shown_as_text(url):
    c = client(url)
    attack = '<script>alert("x")</script><img src=x onerror=alert(1)> & <b>bold</b>'
    baseline, speculative, *_, status = c.predict(*args(attack, max_new_tokens=40), api_name="/race")
    for shown in (baseline, speculative, status):
        assert "<script>alert" not in shown and "<img src=x" not in shown
    *_, text, stages, _, _ = c.predict(attack, "<b>so far</b>", *knobs(max_new_tokens=40), api_name="/step")
    for shown in (text, stages):
        assert "<script>alert" not in shown and "<img src=x" not in shown and "<b>so far" not in shown
    assert "&lt;b&gt;so far&lt;/b&gt;" in text  # the text so far is shown, as text


def test_a_models_yaml_with_a_missing_field_or_unknown_source_is_refused_naming_it(tmp_path):
    import subprocess
    import sys

    from test_ui_client import ROOT

    cases = {
        "no sources": ("models: {t: {dtype: float32}}", "models.t.sources: expected a value (the field is required)"),
        "unknown source": ("models: {t: {sources: [{ftp: x}]}}", "models.t.sources[0]"),
    }
    for label, (models, message) in cases.items():
        path = tmp_path / f"{label.replace(' ', '-')}.yaml"
        path.write_text(textwrap.dedent(f"""
            default_pair: p
            {models}
            pairs: {{p: {{target: t, draft: t, description: x}}}}
        """))
        done = subprocess.run([sys.executable, "app.py", "--config", str(path)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode != 0 and message in done.stderr, (label, done.stderr[-500:])
        assert "Traceback" not in done.stderr


# -- load: several sessions at once, each served its own text --------------------------------------


def text_of(column: str) -> str:
    """A race column's tokens as text (the header's timings differ from run to run)."""
    import html as html_lib
    import re

    body = column.split('class="race-text"', 1)[1]
    return html_lib.unescape(re.sub(r"<[^>]+>", "", body.split(">", 1)[1]))


@pytest.mark.parametrize("sessions", [2, 4])
def test_concurrent_sessions_each_get_their_own_greedy_text(url, sessions):
    # Different prompts and lengths (the tiny pair's random weights say much the same to any
    # prompt), so that a text served to the wrong session would show.
    runs = [(f"def task_{i}(x):", 6 + 3 * i) for i in range(sessions)]
    solo = [text_of(client(url).predict(*args(p, max_new_tokens=n), api_name="/race")[1]) for p, n in runs]
    assert len(set(solo)) == sessions
    jobs = [client(url).submit(*args(p, max_new_tokens=n), api_name="/race") for p, n in runs]
    together = [text_of(job.result(timeout=600)[1]) for job in jobs]
    assert together == solo  # greedy: each identical to its solo run, none swapped
