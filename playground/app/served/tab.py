"""The Served tab: the pair deployed on vLLM plainly and speculatively (started here from the
exported `vllm serve` arguments, or attached by URL), raced on one prompt, and swept over
simultaneous requests to find where speculation stops paying on this machine.

The two deployments run one after another, each timed on its own clock from its send: on a
2-core CPU two servers decoding at once would each get half the machine, and the race would
measure the sharing. Servers started for a page are stopped when it closes (demo.unload).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from playground.app.served import figures
from playground.app.served.sessions import SessionServers
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.flow import check_prompt, fail, model_job, outputs, status_html
from playground.config import MODEL, PROMPT_LOOKUP, RunConfig
from playground import export
from playground.app.shared.sessions import session_of
from playground.measure.bench.served import launch
from playground.measure.bench.served.bench import concurrency_point, counters, parse_levels
from playground.measure.bench.served.client import ServedClient, ServedError
from playground.measure.bench.served.deploy import local_settings, placement_for

TITLE = "Served"
METHODS = {"draft_model": MODEL, "ngram": PROMPT_LOOKUP}  # vLLM's method -> the run's drafter
LEVELS = "1,2,4,8,16"
REDRAW_S = 0.2


@dataclass(frozen=True)
class ServedView:
    status: gr.HTML
    plain_text: gr.Textbox
    spec_text: gr.Textbox
    summary: gr.Markdown
    tokens: gr.Plot
    speedup: gr.Plot
    acceptance: gr.Plot
    rate: gr.Plot
    latency: gr.Plot


def build(ctx: AppContext) -> dict:
    servers = SessionServers()
    gr.Markdown("Deploy the pair on **vLLM** (from its own venv: `python -m playground.serve setup vllm`) "
                "plainly and with speculative decoding, race the two on one prompt, then sweep simultaneous "
                "requests: at high batch the target is compute-bound and the extra verified tokens cost "
                "throughput. Leave the URLs empty to start servers here (127.0.0.1), or attach to running "
                "OpenAI-compatible servers (vLLM or llama.cpp's llama-server).")
    with gr.Row():
        with gr.Column(scale=2):
            pair = controls.pair_control(ctx, elem_id="sv-pair")
            method = gr.Radio(list(METHODS), value="draft_model", label="vLLM speculative method",
                              elem_id="sv-method")
            gamma = controls.control("gamma", ctx.registry.pair(ctx.default_pair).gamma, elem_id="sv-gamma")
            new = controls.control("max_new_tokens", elem_id="sv-new")
            temperature = controls.control("temperature", elem_id="sv-temperature")
            plain_url = gr.Textbox(label="Plain server URL (empty: start one here)", elem_id="sv-plain-url")
            spec_url = gr.Textbox(label="Speculative server URL (empty: start one here)", elem_id="sv-spec-url")
            levels = gr.Textbox(LEVELS, label="Simultaneous requests to sweep", elem_id="sv-levels")
        with gr.Column(scale=3):
            prompt = controls.prompt_box()
            prompt.elem_id = "sv-prompt"
            with gr.Row():
                race, sweep = gr.Button("Race", variant="primary"), gr.Button("Sweep concurrency")
                stop, shut = gr.Button("Stop"), gr.Button("Stop servers")
            view = ServedView(
                status=gr.HTML(status_html("Idle."), elem_id="sv-status"),
                plain_text=gr.Textbox(label="plain", lines=6, interactive=False, elem_id="sv-plain"),
                spec_text=gr.Textbox(label="speculative", lines=6, interactive=False, elem_id="sv-spec"),
                summary=gr.Markdown(elem_id="sv-summary"),
                tokens=gr.Plot(figures.tokens_over_time([], [])),
                speedup=gr.Plot(figures.running_speedup([], [])),
                acceptance=gr.Plot(figures.acceptance_by_position([], None)),
                rate=gr.Plot(figures.concurrency_figures([], [])[0]),
                latency=gr.Plot(figures.concurrency_figures([], [])[1]),
            )
    inputs = [pair, method, gamma, new, temperature, plain_url, spec_url, prompt, levels]

    def race_handler(*values, request: gr.Request = None):
        yield from race_job(ctx, servers, view, session_of(request), *values)

    def sweep_handler(*values, request: gr.Request = None):
        yield from sweep_job(ctx, servers, view, session_of(request), *values)

    def shut_handler(request: gr.Request = None):
        n = servers.stop_session(session_of(request))
        return status_html(f"Stopped {n} server(s).")

    model_job(race, race_handler, inputs, outputs(view), view.status, "served_race", stop=stop)
    model_job(sweep, sweep_handler, inputs, outputs(view), view.status, "served_sweep", stop=stop,
              stop_api="served_stop")
    shut.click(shut_handler, None, view.status, queue=False, api_name="served_stop_servers")
    def unload(request: gr.Request):  # the page closed: its servers go with it
        servers.stop_session(session_of(request))

    return {"unload": unload, "servers": servers, "view": view}


def run_of(pair, method, gamma, new, temperature) -> RunConfig:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    # the run configuration checks each knob against its own range (the error names the field)
    return RunConfig.from_values(dict(pair=pair, drafter=METHODS[method], gamma=gamma, max_new_tokens=new,
                                      temperature=temperature))


def clients(ctx, servers, session, run, method, plain_url, spec_url, status):
    """(plain, speculative) clients: attached by URL, or this session's servers, started when
    missing (both at once, polled, so the page says how long it has waited)."""
    if (plain_url or "").strip() or (spec_url or "").strip():
        if not ((plain_url or "").strip() and (spec_url or "").strip()):
            raise ServedError("give both URLs (plain and speculative), or neither to start servers here")
        return ServedClient(plain_url.strip()), ServedClient(spec_url.strip())
    settings = local_settings(ctx.registry, run)
    placement = placement_for(settings, ctx.registry.pair(run.pair).random_weights)
    wanted = {}
    for name in (export.PLAIN, method):
        args = export.vllm_serve_args(settings, name)
        wanted[name] = servers.get(session, name, args)
        if wanted[name] is None:
            port = launch.free_port()
            wanted[name] = launch.Server(launch.vllm_argv(args, port, placement), port, placement.env(),
                                         f"vllm-{name}").start()
            servers.put(session, name, args, wanted[name])
    began = time.monotonic()
    while not all(server.ready_now() for server in wanted.values()):
        if time.monotonic() - began > launch.READY_TIMEOUT_S:
            raise ServedError(f"vLLM was not ready within {launch.READY_TIMEOUT_S:.0f} s")
        yield {status: status_html(f"Starting vLLM (plain and {method}): {time.monotonic() - began:.0f} s")}
        time.sleep(0.5)
    return wanted[export.PLAIN].client(), wanted[method].client()


def checked(pair, method, gamma, new, temperature, plain_url, spec_url, prompt, levels):
    return (run_of(pair, method, gamma, new, temperature), check_prompt(prompt),
            parse_levels(levels, "simultaneous requests"))


def race_job(ctx, servers, view, session, pair, method, gamma, new, temperature, plain_url, spec_url,
             prompt, levels):
    try:
        run, prompt, _ = checked(pair, method, gamma, new, temperature, plain_url, spec_url, prompt, levels)
        plain, spec = yield from clients(ctx, servers, session, run, method, plain_url, spec_url, view.status)
        times = {"plain": [], "speculative": []}
        texts = {"plain": "", "speculative": ""}
        sampling = {"temperature": run.temperature, "seed": run.seed}
        before = counters(spec)
        for name, client, box in (("plain", plain, view.plain_text), ("speculative", spec, view.spec_text)):
            shown = 0.0
            for item in client.stream(prompt, run.max_new_tokens, ignore_eos=False, **sampling):
                if hasattr(item, "elapsed_s"):  # the whole completion, last
                    times[name], texts[name] = item.times, item.text
                    continue
                texts[name] += item.text
                times[name] += [item.t] * max(len(item.token_ids), 1)
                if time.monotonic() - shown > REDRAW_S:
                    shown = time.monotonic()
                    yield race_frame(view, texts, times, f"Streaming {name}…")
        spent = counters(spec) - before
        frame = race_frame(view, texts, times, "Done.")
        frame[view.acceptance] = figures.acceptance_by_position(spent.acceptance_by_position, spent.alpha)
        frame[view.summary] = race_summary(times, spent)
        yield frame
    except (ValueError, ServedError, RuntimeError) as e:
        yield from fail(view.status, str(e))


def race_frame(view, texts, times, message) -> dict:
    return {view.status: status_html(message), view.plain_text: texts["plain"],
            view.spec_text: texts["speculative"],
            view.tokens: figures.tokens_over_time(times["plain"], times["speculative"]),
            view.speedup: figures.running_speedup(times["plain"], times["speculative"])}


def race_summary(times, spent) -> str:
    rate = {k: len(v) / v[-1] if v and v[-1] else 0.0 for k, v in times.items()}
    speedup = rate["speculative"] / rate["plain"] if rate["plain"] else 0.0
    alpha = f"{spent.alpha:.2f}" if spent.alpha is not None else "–"
    return (f"plain **{rate['plain']:.2f} tok/s** · speculative **{rate['speculative']:.2f} tok/s** · "
            f"speedup **{speedup:.2f}×** · α (server counters) **{alpha}** over {spent.drafts} drafts")


def sweep_job(ctx, servers, view, session, pair, method, gamma, new, temperature, plain_url, spec_url,
              prompt, levels):
    try:
        run, prompt, levels = checked(pair, method, gamma, new, temperature, plain_url, spec_url, prompt, levels)
        if not levels:
            raise ValueError(f"simultaneous requests must be comma-separated integers in [1, 256], e.g. {LEVELS}")
        plain, spec = yield from clients(ctx, servers, session, run, method, plain_url, spec_url, view.status)
        curves = {"plain": [], "speculative": []}
        for n in levels:
            for name, client in (("plain", plain), ("speculative", spec)):
                yield {view.status: status_html(f"{n} simultaneous requests on {name}…")}
                curves[name].append(concurrency_point(client, [prompt], n, run))
                rate, latency = figures.concurrency_figures(curves["plain"], curves["speculative"])
                yield {view.rate: rate, view.latency: latency}
        yield {view.status: status_html("Sweep done.")}
    except (ValueError, ServedError, RuntimeError) as e:
        yield from fail(view.status, str(e))
