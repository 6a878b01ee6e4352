"""The drafts board (measure/bench/board/: lineup.py, rounds.py, table.py): which entries it offers,
the best-γ forecast from a probe's per-position counts, both rounds on the tiny pair, and what it shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from playground.config import CHAIN, TREE, RunConfig
from playground.engine.sampling import expected_speedup
from playground.measure.bench import sweep
from playground.measure.bench.board import lineup, rounds
from playground.measure.bench.board import table as board_table
from playground.measure.bench.prompts import EXAMPLE, Prompt
from playground.measure.bench.runs import Interrupted
from playground.models.pair_cache import PairCache
from playground.models.registry import load_registry

REGISTRY = load_registry()
TINY, DEFAULT = REGISTRY.pair("tiny"), REGISTRY.pair("default")
PROMPTS = [Prompt("p1", EXAMPLE, "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n# fib(n) is")]


def test_all_is_every_drafter_the_target_can_use_here():
    # on this CPU the tiny float32 draft is also tried in int8, as the default pair's int4 draft is
    assert lineup.available(REGISTRY, TINY) == ["model", "model@int8-cpu", "prompt_lookup", "suffix", "recycling",
                                               "self", "hybrid", "tree", "suffix-tree", "recycling-tree",
                                               "hybrid-tree", "self-tree"]
    default = lineup.available(REGISTRY, DEFAULT)
    assert default[:2] == ["model", "model@int8-cpu"]
    # the pair's draft over its whole vocabulary, and the two packs with other tokenizers; not the
    # hub-only models, not another pair's target, not a random-weight model
    assert [n for n in default if n.startswith("model:")] == [
        "model:qwen2.5-coder-0.5b-instruct", "model:smollm2-135m-instruct", "model:gemma-3-270m"]


def test_an_entry_is_the_run_it_names_at_the_probes_gamma():
    base = RunConfig(pair="default", gamma=3, draft_vocab=65536)
    own = lineup.entry("model", base, REGISTRY, DEFAULT).cell
    full = lineup.entry("model:qwen2.5-coder-0.5b-instruct", base, REGISTRY, DEFAULT).cell
    other = lineup.entry("model:gemma-3-270m", base, REGISTRY, DEFAULT).cell
    tree = lineup.entry("recycling-tree", base, REGISTRY, DEFAULT).cell
    assert (own.draft, own.draft_vocab, own.gamma) == ("", 65536, lineup.PROBE_GAMMA)
    assert (full.draft, full.draft_vocab) == ("", 0) and (other.draft, other.draft_vocab) == ("gemma-3-270m", 0)
    assert (tree.drafter, tree.speculation, tree.tree_depth) == ("recycling", TREE, lineup.PROBE_GAMMA)
    # measured in an order that loads each pair once
    names = [e.name for e in lineup.entries(["model:gemma-3-270m", "suffix", "model"], base, REGISTRY, DEFAULT)]
    assert names == ["suffix", "model", "model:gemma-3-270m"]


def test_a_quantized_entry_loads_its_draft_in_that_quantization():
    base = RunConfig(pair="default", gamma=3, draft_vocab=65536)
    own = lineup.entry("model@int8-cpu", base, REGISTRY, DEFAULT).cell
    full = lineup.entry("model:qwen2.5-coder-0.5b-instruct@none", base, REGISTRY, DEFAULT).cell
    other = lineup.entry("model:gemma-3-270m@int8-cpu", base, REGISTRY, DEFAULT).cell
    assert (own.draft, own.draft_vocab, own.draft_quantization) == ("", 65536, "int8-cpu")
    assert (full.draft, full.draft_vocab, full.draft_quantization) == ("", 0, "none")
    assert (other.draft, other.draft_quantization) == ("gemma-3-270m", "int8-cpu")
    assert own.loading()["draft_quantization"] == "int8-cpu"  # what the cache loads the pair with
    made = lineup.entries(["model@int8-cpu", "suffix", "tree@int8-cpu", "model"], base, REGISTRY, DEFAULT)
    assert [e.name for e in made] == ["suffix", "model", "model@int8-cpu", "tree@int8-cpu"]  # one load each
    plan = lineup.plan_of(made, base, PROMPTS)
    assert plan.grid.axes == {"draft_quantization": ["default", "int8-cpu"]}


@pytest.mark.parametrize("text, message", [
    ("model@int3", "the quantization must be one of auto, none, nf4, int8, int8-cpu, int4-cpu, got 'int3'"),
    ("suffix@int8-cpu", "only a draft model has a quantization"),
])
def test_a_bad_quantized_entry_names_the_flag(text, message):
    with pytest.raises(sweep.SettingError, match=message) as error:
        lineup.entry(text, RunConfig(pair="default"), REGISTRY, DEFAULT)
    assert error.value.flag == "--drafters"


@pytest.mark.parametrize("text, message", [
    ("", "choose at least one drafter"),
    ("medusa", "unknown drafter 'medusa'"),
    ("prompt_lookup-tree", "unknown drafter 'prompt_lookup-tree'"),
    ("suffix:gemma-3-270m", "unknown drafter"),
    ("model:no-such-model", "unknown model 'no-such-model'"),
    ("model:qwen2.5-coder-1.5b-instruct", "that is the target"),
])
def test_a_bad_drafter_names_the_flag(text, message):
    with pytest.raises(sweep.SettingError, match=message) as error:
        lineup.entries(lineup.names_of(text, REGISTRY, DEFAULT), RunConfig(pair="default"), REGISTRY, DEFAULT)
    assert error.value.flag == "--drafters"


# -- the best γ --------------------------------------------------------------------------------------


def probe_records(alpha: float, calls: int = 10_000, gamma: int = 4) -> list[dict]:
    """Counts of a chain whose every position is accepted with probability alpha given the last was."""
    reached = [calls * alpha ** (i + 1) for i in range(gamma)]
    return [{"target_calls": calls, "position_drafted": [calls] * gamma, "position_accepted": reached}]


@pytest.mark.parametrize("alpha, c, v", [(0.8, 0.1, (1, 1.1, 1.2, 1.3, 1.4)), (0.6, 0.4, (1, 1.3, 1.7, 2.5, 3.5))])
def test_the_forecast_of_a_cut_chain_is_the_formula(alpha, c, v):
    for gamma in range(1, 5):
        assert rounds.forecast(probe_records(alpha), c, v, gamma) == pytest.approx(expected_speedup(alpha, gamma, c, v))


def test_best_gamma_follows_the_verification_cost():
    run = {"summary": {"c": 0.1}, "prompts": probe_records(0.8)}
    assert rounds.best_gamma(run, (1, 1.02, 1.04, 1.06, 1.08))[0] == 4  # cheap verification: draft deep
    steep, forecasts = rounds.best_gamma(run, (1, 1.5, 3.0, 4.5, 6.0))  # each row a plain step and more
    assert steep == 1 and forecasts[1] == max(forecasts.values())


# -- both rounds, on the tiny pair ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded():
    return PairCache(REGISTRY).get("tiny")


def measured(loaded, names, v, **stop) -> dict:
    base = RunConfig(pair="tiny", max_new_tokens=12, temperature=0.0)
    entries = lineup.entries(names, base, REGISTRY, TINY)
    plan = lineup.plan_of(entries, base, PROMPTS, repeats=1, warmup=0)
    return sweep.run(plan, lambda cell: loaded, {}, runs_of=lambda p, pair_of, progress: rounds.rounds(
        p, pair_of, progress, [e.name for e in entries], lambda pair, runner: v, **stop))


def test_a_steep_verification_cost_remeasures_each_chain_at_a_shorter_gamma(loaded):
    report = measured(loaded, ["model", "suffix", "tree"], (1.0, 3.0, 5.0, 7.0, 9.0))
    rounds = [(r["board"]["entry"], r["board"]["round"], r["settings"]["gamma"]) for r in report["runs"]]
    assert rounds[:3] == [("model", 1, 4), ("suffix", 1, 4), ("tree", 1, 4)]
    assert ("model", 2, 1) in rounds and ("suffix", 2, 1) in rounds  # chains again, at the best γ
    assert not [r for r in rounds if r[0] == "tree" and r[1] == 2]  # a tree keeps the probe's depth
    final = {r["board"]["entry"]: r for r in board_table.final_runs(report)}
    assert final["model"]["board"]["round"] == 2 and final["tree"]["board"]["round"] == 1
    assert all(r["summary"]["identical"] for r in report["runs"])  # greedy: every drafter lossless


def test_a_quantized_entry_is_measured_on_a_draft_in_that_quantization():
    cache = PairCache(REGISTRY)
    base = RunConfig(pair="tiny", max_new_tokens=12, temperature=0.0)
    entries = lineup.entries(["model@int8-cpu", "model"], base, REGISTRY, TINY)
    plan = lineup.plan_of(entries, base, PROMPTS, repeats=1, warmup=0)
    report = sweep.run(plan, lambda cell: cache.get(cell.pair, **cell.loading()), {},
                       runs_of=lambda p, pair_of, progress: rounds.rounds(
                           p, pair_of, progress, [e.name for e in entries], lambda pair, runner: (1.0,) * 5))
    drafts = {r["board"]["entry"]: r["draft"]["quantization"] for r in report["runs"]}
    assert drafts == {"model": "none", "model@int8-cpu": "int8-cpu"}
    labels = {r["board"]["entry"]: board_table.label(r) for r in report["runs"]}
    assert labels["model@int8-cpu"].endswith(", int8-cpu") and "int8" not in labels["model"]


def test_stop_ends_the_board_within_one_engine_step(loaded):
    calls = []
    hook = loaded.target.model.register_forward_hook(lambda *_: calls.append(1))
    pressed = []

    def stopped() -> bool:
        if len(calls) >= 5 and not pressed:
            pressed.append(len(calls))
        return bool(pressed)

    try:
        with pytest.raises(Interrupted):
            measured(loaded, ["model", "suffix"], (1.0, 1.0, 1.0, 1.0, 1.0), stopped=stopped)
    finally:
        hook.remove()
    assert len(calls) - pressed[0] <= 1  # at most the forward in flight when Stop came


# -- what the board shows -------------------------------------------------------------------------------


def run_of(entry, tok_s, base_tok_s, alpha=0.5, c=0.1, category="coding", extra=None, gamma=3, round_=1):
    summary = {"prompts": 1, "baseline_tok_s": base_tok_s, "speculative_tok_s": tok_s, "alpha": alpha, "c": c,
               "verify_cost": 1.2, "mean_accepted_tokens": 1.5, "speedup_total": tok_s / base_tok_s,
               "predicted_speedup": 1.1, "identical_prompts": 1, **(extra or {})}
    return {"settings": {"drafter": entry.split(":")[0], "gamma": gamma, "speculation": CHAIN, "draft_vocab": 0},
            "runner": "onnxruntime", "summary": summary, "categories": {category: summary}, "prompts": [],
            "board": {"entry": entry, "round": round_, "v": [1.0, 1.2, 1.4, 1.6, 1.8]}}


def test_speedups_are_against_the_fastest_plain_decoding_named():
    report = {"runs": [run_of("model", 12.0, 10.0), run_of("suffix", 11.0, 10.0, extra={"llamacpp_tok_s": 11.5}),
                       run_of("model", 13.0, 10.0, gamma=2, round_=2)]}
    plain = board_table.fastest_plain(board_table.final_runs(report))
    assert plain.name == "llama.cpp's own loop" and plain.tok_s == 11.5
    rows = board_table.leaderboard(report)
    assert [(r["entry"], r["gamma"]) for r in rows] == [("model", 2), ("suffix", 3)]  # the last round's
    assert rows[0]["over_fastest"] == pytest.approx(13 / 11.5)
    assert board_table.winners(report) == [{"category": "coding", "winner": "model",
                                            "over_fastest": pytest.approx(13 / 11.5),
                                            "fastest_plain": "llama.cpp's own loop"}]
    slow = {"runs": [run_of("model", 9.0, 10.0)]}
    assert board_table.winners(slow)[0]["winner"] == "plain decoding"


def test_the_board_shows_the_weights_counted_beside_the_growth_measured():
    memory = {"speculative_weights_mb": 950.4, "speculative_resident_mb": 1480.6}
    report = {"runs": [run_of("model", 12.0, 10.0, extra=memory), run_of("suffix", 11.0, 10.0)]}
    rows = {r["entry"]: r for r in board_table.leaderboard(report)}
    assert (rows["model"]["weights_mb"], rows["model"]["resident_mb"]) == (950.4, 1480.6)
    assert (rows["suffix"]["weights_mb"], rows["suffix"]["resident_mb"]) == (None, None)  # not in its report
    printed = board_table.format_board(report)
    assert "MB cnt MB rss" in printed and "MB rss (measured)" in printed
    line = next(line for line in printed.splitlines() if line.startswith("model "))
    assert "   950   1481 " in line, line


def test_a_machine_slowing_down_over_the_board_moves_no_ratio():
    """Each cell's plain run is timed beside its speculative one; across cells the machine may drift
    (here it halves its speed), so a runner's plain rate is the median over its cells and each cell
    keeps its own side-by-side speedup: two equal drafters measured before and after the slowdown tie."""
    report = {"runs": [run_of("suffix", 12.0, 10.0), run_of("prompt_lookup", 6.0, 5.0), run_of("self", 5.0, 7.5)]}
    rows = {r["entry"]: r for r in board_table.leaderboard(report)}
    assert rows["suffix"]["over_fastest"] == pytest.approx(rows["prompt_lookup"]["over_fastest"]) == pytest.approx(1.2)
    assert rows["self"]["over_fastest"] == pytest.approx(5 / 7.5)
    assert board_table.fastest_plain(report["runs"]).tok_s == 7.5  # the median of 10, 5 and 7.5


def test_the_map_says_which_drafter_cannot_pay():
    v = [1.0, 1.2, 1.4, 1.6, 1.8]
    # on the break-even line the formula gives exactly 1
    for alpha in (0.3, 0.6, 0.9):
        c = board_table.break_even_c(alpha, v)
        assert max(expected_speedup(alpha, g, c, v) for g in range(1, 5)) == pytest.approx(1.0)
    report = {"runs": [run_of("self", 3.0, 10.0, alpha=0.1, c=1.1), run_of("model", 12.0, 10.0, alpha=0.8, c=0.3)]}
    said = board_table.cannot_pay(report)
    assert len(said) == 1 and said[0].startswith("self cannot pay on this machine: at α 0.10 and c 1.10")
    speedups, gammas = board_table.speedup_grid(v, [0.5, 0.9], [0.0, 0.5])
    assert speedups[0][1] == pytest.approx(max(expected_speedup(0.9, g, 0.0, v) for g in range(1, 5)))
    assert gammas[0][1] == 4 and gammas[1][0] == 1  # free drafts go deep; costly ones with low α stay short


def test_coverage_marks_the_tokens_each_drafter_supplied_up_to_a_divergence():
    def with_prompt(entry, tokens, marks, identical):
        run = run_of(entry, 10.0, 10.0)
        run["prompts"] = [{"id": "p", "output_tokens": tokens, "from_draft": marks, "identical": identical}]
        return run
    report = {"runs": [with_prompt("suffix", [5, 6, 7, 8], "0110", True),
                       with_prompt("model", [5, 6, 9, 9], "1111", False)]}
    tokens, marks = board_table.coverage(report, "p")
    assert tokens == [5, 6, 7, 8]
    assert marks == {"suffix": [False, True, True, False], "model": [True, True, False, False]}


def test_the_estimate_counts_every_run_and_a_second_round_at_most():
    base = RunConfig(pair="tiny", max_new_tokens=100)
    entries = lineup.entries(["model", "tree", "self"], base, REGISTRY, TINY)
    plan = lineup.plan_of(entries, base, PROMPTS * 2, repeats=1, warmup=1)
    least, most = lineup.estimate_seconds(plan, 0.05, self_entries=1)
    per_run = 100 * 0.05 * 1.2
    assert least == pytest.approx((plan.total_runs + plan.runs_per_cell) * per_run)
    assert most == pytest.approx(least + 2 * plan.runs_per_cell * per_run)  # two chains may run again
    with pytest.raises(sweep.SettingError, match="choose at least one prompt"):
        lineup.plan_of(entries, base, [])
    assert replace(entries[0].cell, gamma=2).gamma == 2
