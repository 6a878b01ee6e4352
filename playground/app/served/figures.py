"""The Served tab's figures: pure functions of streamed completions, counters and concurrency
points (no Gradio, no server). Times are each request's own clock, from its send."""

from __future__ import annotations

from playground.app.shared.plots import BASELINE_COLOR, KEEP_COLOR, SPEC_COLOR, empty_figure, figure, line
from playground.measure.bench.served.bench import crossover

LATENCY_COLOR = "#e07b00"


def steps(times: list[float]) -> tuple[list[float], list[int]]:
    """(seconds, tokens so far) after each token's arrival, from (0, 0)."""
    return [0.0, *times], list(range(len(times) + 1))


def tokens_over_time(plain_times: list[float], spec_times: list[float]):
    if not plain_times and not spec_times:
        return empty_figure("tokens over time: waiting for the first token")
    traces = [line(*steps(plain_times), "plain", BASELINE_COLOR, shape="hv"),
              line(*steps(spec_times), "speculative", SPEC_COLOR, shape="hv")]
    return figure("Tokens over time", "seconds from the request", "tokens", traces)


def tokens_at(times: list[float], t: float) -> int:
    return sum(1 for x in times if x <= t)


def running_speedup(plain_times: list[float], spec_times: list[float]):
    """Speculative tokens / plain tokens at each moment both have produced one (same clock each)."""
    if not plain_times or not spec_times:
        return empty_figure("running speedup: needs tokens from both deployments")
    start = max(plain_times[0], spec_times[0])
    moments = sorted({t for t in plain_times + spec_times if t >= start})
    ratio = [tokens_at(spec_times, t) / max(tokens_at(plain_times, t), 1) for t in moments]
    return figure("Running speedup (speculative ÷ plain tokens)", "seconds", "×",
                  [line(moments, ratio, "speedup", SPEC_COLOR)], hlines=[(1.0, "1×", BASELINE_COLOR, "dot")])


def acceptance_by_position(rates: list[float], alpha: float | None):
    """The server's own counters: P(accepted) at each draft position."""
    if not rates:
        return empty_figure("acceptance by position: no drafts counted (plain, or attached without /metrics)")
    bars = dict(type="bar", x=[str(i + 1) for i in range(len(rates))], y=rates, name="accepted",
                marker=dict(color=KEEP_COLOR))
    guides = [(alpha, f"α = {alpha:.2f}", SPEC_COLOR, "dash")] if alpha is not None else []
    return figure("Acceptance by draft position (server counters)", "draft position", "P(accepted)", [bars],
                  hlines=guides, y_range=[0, 1.05])


def concurrency_figures(plain: list[dict], spec: list[dict]):
    """(aggregate tok/s, per-request latency) against simultaneous requests, the crossover marked."""
    if not plain and not spec:
        message = "concurrency sweep: press Sweep"
        return empty_figure(message), empty_figure(message)
    x = lambda pts: [p["concurrency"] for p in pts]
    rate = figure("Aggregate throughput", "simultaneous requests", "tok/s (all requests)", [
        line(x(plain), [p["aggregate_tok_s"] for p in plain], "plain", BASELINE_COLOR, mode="lines+markers"),
        line(x(spec), [p["aggregate_tok_s"] for p in spec], "speculative", SPEC_COLOR, mode="lines+markers")])
    latency = figure("Per-request latency (median)", "simultaneous requests", "seconds", [
        line(x(plain), [p["latency_s_median"] for p in plain], "plain", BASELINE_COLOR, mode="lines+markers"),
        line(x(spec), [p["latency_s_median"] for p in spec], "speculative", SPEC_COLOR, mode="lines+markers")])
    for fig in (rate, latency):
        fig.update_xaxes(type="log", tickvals=x(plain or spec))
    n = crossover(plain, spec)
    if n is not None:
        for fig in (rate, latency):
            fig.add_vline(x=n, line=dict(color=LATENCY_COLOR, dash="dash"),
                          annotation_text=f"speculation stops paying: {n} requests", annotation_position="top left")
    return rate, latency
