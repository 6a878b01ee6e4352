"""The Served tab: the pair deployed on vLLM or llama.cpp's llama-server, plainly and speculatively
(started here from the Export tab's `vllm serve` arguments or `llama-server` command, or attached by
URL), raced on one prompt, and swept over simultaneous requests to find where speculation stops
paying on this machine.

The two deployments run one after another, each timed on its own clock from its send: on a
2-core CPU two servers decoding at once would each get half the machine, and the race would
measure the sharing. Servers started for a page are stopped when it closes (demo.unload).

Both buttons read one ServedForm; `race_job` and `sweep_job` take it with the app's context, the
servers the sessions started, and the view.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from functools import partial

import gradio as gr

from playground.app.served import figures, openvino_race
from playground.app.served.sessions import SessionServers
from playground.app.shared import controls
from playground.app.shared.context import AppContext
from playground.app.shared.flow import Stop, check_prompt, fail, load_pair, model_job, outputs, status_html
from playground.app.shared.form import Form
from playground.config import MODEL, PROMPT_LOOKUP, RunConfig
from playground import export
from playground.app.shared.sessions import session_of
from playground.measure.bench.served import launch
from playground.measure.bench.served.bench import concurrency_point, counters, parse_levels
from playground.measure.bench.served.client import ServedClient, ServedError
from playground.measure.bench.served.counters import from_llamacpp_timings
from playground.measure.bench.served.deploy import gguf_settings, llamacpp_args, local_settings, placement_for, \
    slot_args

TITLE = "Served"
METHODS = {"draft_model": MODEL, "ngram": PROMPT_LOOKUP}  # the served method -> the run's drafter
VLLM, LLAMACPP, OPENVINO = "vLLM", "llama.cpp", "OpenVINO GenAI"
ENGINES = (VLLM, LLAMACPP, OPENVINO)  # OpenVINO runs in this process (openvino_race.py): races only
LEVELS = "1,2,4,8,16"
REDRAW_S = 0.2


@dataclass(frozen=True)
class ServedForm(Form):
    """What Race and Sweep concurrency read from the page; field order is the API's parameter order."""

    pair: str
    engine: str  # ENGINES: which server the tab starts
    method: str  # the speculative method (METHODS): vLLM's draft_model / ngram, llama.cpp's draft-simple /
    # ngram-simple
    gamma: int
    new: int  # max new tokens
    temperature: float
    plain_url: str  # a running plain server, or "" to start one here
    spec_url: str  # likewise, the speculative one
    prompt: str
    levels: str  # simultaneous requests to sweep, e.g. 1,2,4

    def parse(self) -> tuple[RunConfig, list[int]]:
        """(the run, the concurrency levels), checked before any server starts (ValueError names the
        field)."""
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        # the run configuration checks each knob against its own range (the error names the field)
        run = RunConfig.from_values(dict(pair=self.pair, drafter=METHODS[self.method], gamma=self.gamma,
                                         max_new_tokens=self.new, temperature=self.temperature))
        check_prompt(self.prompt)
        return run, parse_levels(self.levels, "simultaneous requests")

    @property
    def urls(self) -> tuple[str, str]:
        return (self.plain_url or "").strip(), (self.spec_url or "").strip()


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
                "or **llama.cpp**'s llama-server on the pair's GGUF files (`python -m playground.serve setup "
                "llama-server`), from the Export tab's command, or race **OpenVINO GenAI**'s own loop on "
                "them in this process (`python -m playground.serve setup openvino`; greedy, no concurrency sweep), "
                "plainly and with speculative decoding, race the two on one prompt, then sweep simultaneous "
                "requests: at high batch the target is compute-bound and the extra verified tokens cost "
                "throughput. Leave the URLs empty to start servers here (127.0.0.1), or attach to running "
                "OpenAI-compatible servers (vLLM or llama.cpp's llama-server).")
    with gr.Row():
        with gr.Column(scale=2):
            pair = controls.pair_control(ctx, elem_id="sv-pair")
            engine = gr.Radio(list(ENGINES), value=VLLM, label="Engine", elem_id="sv-engine")
            method = gr.Radio(list(METHODS), value="draft_model", elem_id="sv-method",
                              label="Speculative method (llama.cpp: draft-simple, ngram-simple)")
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
    form = ServedForm(pair, engine, method, gamma, new, temperature, plain_url, spec_url, prompt, levels)

    def shut_handler(request: gr.Request = None):
        n = servers.stop_session(session_of(request))
        return status_html(f"Stopped {n} server(s).")

    model_job(race, partial(race_job, ctx, servers, view), form, outputs(view), view.status, "served_race",
              Stop(stop, flags=ctx.stops))  # the flag reaches OpenVINO's loop, which no frame interrupts
    model_job(sweep, partial(sweep_job, ctx, servers, view), form, outputs(view), view.status, "served_sweep",
              Stop(stop, "served_stop"))
    shut.click(shut_handler, None, view.status, queue=False, api_name="served_stop_servers")

    def unload(request: gr.Request):  # the page closed: its servers go with it
        servers.stop_session(session_of(request))

    return {"unload": unload, "servers": servers, "view": view}


def clients(ctx: AppContext, servers: SessionServers, form: ServedForm, run: RunConfig, status):
    """(plain, speculative) clients: attached by URL, or this session's servers, started when
    missing (both at once; the page says how long it has waited for them)."""
    plain_url, spec_url = form.urls
    if plain_url or spec_url:
        if not (plain_url and spec_url):
            raise ServedError("give both URLs (plain and speculative), or neither to start servers here")
        return ServedClient(plain_url), ServedClient(spec_url)
    if form.engine == LLAMACPP:
        return (yield from llamacpp_clients(ctx, servers, form, run, status))
    settings = local_settings(ctx.registry, run)
    placement = placement_for(settings, ctx.registry.pair(run.pair).random_weights)
    wanted = {}
    for name in (export.PLAIN, form.method):
        args = export.vllm_serve_args(settings, name)
        wanted[name] = servers.get(form.session, name, args)
        if wanted[name] is None:
            port = launch.free_port()
            wanted[name] = launch.Server(launch.vllm_argv(args, port, placement), port, placement.env(),
                                         f"vllm-{name}").start()
            servers.put(form.session, name, args, wanted[name])
    yield from ready(list(wanted.values()), status, f"Starting vLLM (plain and {form.method})")
    return wanted[export.PLAIN].client(), wanted[form.method].client()


def llamacpp_clients(ctx: AppContext, servers: SessionServers, form: ServedForm, run: RunConfig, status):
    """As clients(), for llama-server: the exported command (less its speculation flags for the plain
    one) on the pair's GGUF files, with a slot per simultaneous request of the largest level."""
    settings = gguf_settings(ctx.registry, run)
    placement = placement_for(settings, ctx.registry.pair(run.pair).random_weights)
    slots = slot_args(placement, max(parse_levels(form.levels, "simultaneous requests"), default=1))
    wanted = {}
    for name in (export.PLAIN, form.method):
        args = llamacpp_args(settings, name) + slots
        wanted[name] = servers.get(form.session, name, args)
        if wanted[name] is None:
            port = launch.free_port()
            wanted[name] = launch.Server(launch.llamacpp_argv(args, port), port, {}, f"llama-server-{name}").start()
            servers.put(form.session, name, args, wanted[name])
    yield from ready(list(wanted.values()), status, f"Starting llama-server (plain and {form.method})")
    return wanted[export.PLAIN].client(), wanted[form.method].client()


def prompt_of(ctx: AppContext, form: ServedForm, run: RunConfig):
    """What the servers are sent: the text, or for llama.cpp on the tiny pair its byte tokens (the tiny
    GGUF's vocabulary is for ids, not for llama.cpp's own tokenizer)."""
    if form.engine == LLAMACPP and ctx.registry.pair(run.pair).random_weights:
        from playground.models.tiny import byte_tokenizer

        return byte_tokenizer()(form.prompt, add_special_tokens=False)["input_ids"]
    return form.prompt


def ready(servers: list[launch.Server], status, what: str):
    """Wait for every server's Server.wait_ready at once, each in a thread of its own (it blocks), and
    say on the page every half second how long it has been, so Stop still lands between two redraws.
    The first server that fails (it exited, or timed out: wait_ready stops it) raises its ServedError,
    with the tail of its log, here."""
    began, outcomes = time.monotonic(), queue.Queue()
    for server in servers:
        threading.Thread(target=waiting, args=(server, outcomes), name=f"{server.name}-ready",
                         daemon=True).start()
    for _ in servers:
        while True:
            try:
                error = outcomes.get(timeout=0.5)
                break
            except queue.Empty:
                yield {status: status_html(f"{what}: {time.monotonic() - began:.0f} s")}
        if error is not None:
            raise error


def waiting(server: launch.Server, outcomes: queue.Queue) -> None:
    """A server's wait_ready in its own thread: None or the error it raised goes to `outcomes`."""
    try:
        server.wait_ready()
        outcomes.put(None)
    except Exception as e:  # handed to the page's thread, which raises it
        outcomes.put(e)


def race_job(ctx: AppContext, servers: SessionServers, view: ServedView, form: ServedForm):
    """Race the plain and the speculative deployment on the prompt, one after the other, each on
    its own clock; acceptance from the speculative server's counters."""
    try:
        run, _ = form.parse()
        if form.engine == OPENVINO:
            yield from openvino_job(ctx, view, form, run)
            return
        plain, spec = yield from clients(ctx, servers, form, run, view.status)
        before = counters(spec)
        times, texts, finals = yield from streaming(view, prompt_of(ctx, form, run), run,
                                                    {"plain": plain, "speculative": spec})
        spent = counters(spec) - before
        if not spent.draft_tokens and finals["speculative"].timings:  # llama.cpp: per completion
            spent = from_llamacpp_timings(finals["speculative"].timings)
        frame = race_frame(view, texts, times, "Done.")
        frame[view.acceptance] = figures.acceptance_by_position(spent.acceptance_by_position, spent.alpha)
        frame[view.summary] = race_summary(times, spent)
        yield frame
    except (ValueError, ServedError, RuntimeError) as e:
        yield from fail(view.status, str(e))


def openvino_job(ctx: AppContext, view: ServedView, form: ServedForm, run: RunConfig):
    """The race on OpenVINO GenAI's own loop: the pair loaded here, plain then with its draft."""
    from playground.models.text import encode_prompt

    openvino_race.check(form, run)
    pair = yield from load_pair(ctx, run, view.status)
    ids = encode_prompt(pair.tokenizer, form.prompt)
    yield {view.status: status_html("OpenVINO GenAI: plain, then with its draft (the first race also writes "
                                    "each model's IR into the cache)…")}
    with ctx.stops.held(form.session) as flag:
        times, tokens, spent = openvino_race.race(pair, ids, run, flag.is_set)
    if flag.is_set():
        yield {view.status: status_html("Stopped.")}
        return
    texts = {name: pair.tokenizer.decode(ids_, skip_special_tokens=True) for name, ids_ in tokens.items()}
    frame = race_frame(view, texts, times, "Done.")
    frame[view.acceptance] = figures.acceptance_by_position([], spent.alpha)
    frame[view.summary] = race_summary(times, spent)
    yield frame


def streaming(view: ServedView, prompt: str, run: RunConfig, clients: dict):
    """Stream the prompt's completion from each client in turn, redrawing both panes at most every
    REDRAW_S; returns ({name: token times}, {name: text}, {name: its whole Completion})."""
    times = {name: [] for name in clients}
    texts = {name: "" for name in clients}
    finals = {}
    for name, client in clients.items():
        shown = 0.0
        for item in client.stream(prompt, run.max_new_tokens, ignore_eos=False, temperature=run.temperature,
                                  seed=run.seed):
            if hasattr(item, "elapsed_s"):  # the whole completion, last
                times[name], texts[name], finals[name] = item.times, item.text, item
                continue
            texts[name] += item.text
            times[name] += [item.t] * max(len(item.token_ids), 1)
            if time.monotonic() - shown > REDRAW_S:
                shown = time.monotonic()
                yield race_frame(view, texts, times, f"Streaming {name}…")
    return times, texts, finals


def race_frame(view, texts, times, message) -> dict:
    return {view.status: status_html(message), view.plain_text: texts["plain"],
            view.spec_text: texts["speculative"],
            view.tokens: figures.tokens_over_time(times["plain"], times["speculative"]),
            view.speedup: figures.running_speedup(times["plain"], times["speculative"])}


def race_summary(times, spent) -> str:
    rate = {k: len(v) / v[-1] if v and v[-1] else 0.0 for k, v in times.items()}
    speedup = rate["speculative"] / rate["plain"] if rate["plain"] else 0.0
    alpha = f"{spent.alpha:.2f}" if spent.alpha is not None else "–"
    over = (f"over {spent.drafts} drafts" if spent.drafts else
            f"({spent.accepted_tokens} of {spent.draft_tokens} drafted tokens accepted)")
    return (f"plain **{rate['plain']:.2f} tok/s** · speculative **{rate['speculative']:.2f} tok/s** · "
            f"speedup **{speedup:.2f}×** · α (server counters) **{alpha}** {over}")


def sweep_job(ctx: AppContext, servers: SessionServers, view: ServedView, form: ServedForm):
    """Sweep simultaneous requests on both deployments: throughput and latency per level."""
    try:
        run, levels = form.parse()
        if form.engine == OPENVINO:
            raise ValueError("engine: OpenVINO GenAI runs in this process, one request at a time; the "
                             "concurrency sweep needs a server (vLLM or llama.cpp)")
        if not levels:
            raise ValueError(f"simultaneous requests must be comma-separated integers in [1, 256], e.g. {LEVELS}")
        plain, spec = yield from clients(ctx, servers, form, run, view.status)
        curves = {"plain": [], "speculative": []}
        for n in levels:
            for name, client in (("plain", plain), ("speculative", spec)):
                yield {view.status: status_html(f"{n} simultaneous requests on {name}…")}
                curves[name].append(concurrency_point(client, [prompt_of(ctx, form, run)], n, run))
                rate, latency = figures.concurrency_figures(curves["plain"], curves["speculative"])
                yield {view.rate: rate, view.latency: latency}
        yield {view.status: status_html("Sweep done.")}
    except (ValueError, ServedError, RuntimeError) as e:
        yield from fail(view.status, str(e))
