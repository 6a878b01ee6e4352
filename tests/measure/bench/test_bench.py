"""The benchmark on the tiny pair: CLI end to end, files and their schema, argument errors, prompt
loaders, divergence margins, the oracle drafter, transformers' constant-gamma reference and the
GPU script's CPU path. Timings are printed by the benchmark and never asserted here."""

import csv
import json
import math
import shutil

import pytest

from playground.measure.bench import charts, cli

from playground.measure.hardware import gpu_oracle, gpu_paths
from playground.measure.bench.divergence import (NEAR_TIE, first_divergence, found, margin_at, margins_by_position,
                                                 near_tie, top2_margin)
from playground.measure.bench.sweep import Grid, SettingError, expand, parse_axes
from playground.measure.bench.runs import Run, Setup, identity_fields
from playground.config import RunConfig
from playground.measure.hardware.oracle import OracleDrafter, greedy_continuation
from playground.measure.bench.prompts import load_prompts
from playground.measure.bench.references.transformers import hf_generate, matched_assistant
from playground.measure.bench.report import atomic_write
from playground.measure.bench.summary import summarize_records
from playground.engine.generate import SpecConfig, generate
from playground.engine.events import TARGET, StepEvent, output_tokens, summarize
from playground.models.text import encode_prompt

PROMPT_FIELDS = {"id", "category", "new_tokens", "baseline_tok_s", "speculative_tok_s", "speedup",
                 "acceptance_rate", "mean_accepted_tokens", "identical", "first_divergence",
                 "divergence_margin", "hf_generate_tok_s", "hf_assisted_tok_s", "alpha", "c",
                 "predicted_speedup"}
SUMMARY_FIELDS = {"prompts", "new_tokens", "baseline_tok_s", "speculative_tok_s", "speedup",
                  "acceptance_rate", "mean_accepted_tokens", "identical", "alpha", "c", "predicted_speedup",
                  "hf_generate_tok_s", "hf_assisted_tok_s", "hf_assisted_speedup", "losing_prompts"}
SMALL_RUN = ["--pair", "tiny", "--categories", "coding,qa", "--limit", "1", "--max-new-tokens", "12",
             "--repeats", "1", "--warmup", "0"]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """One CLI run over a 2 x 2 grid with the transformers reference, writing every text output."""
    out = tmp_path_factory.mktemp("bench")
    argv = SMALL_RUN + ["--warmup", "1", "--sweep", "gamma=1,3", "temperature=0,0.7",
                        "--reference", "transformers", "--json", str(out / "r.json"),
                        "--csv", str(out / "r.csv"), "--html", str(out / "r.html")]
    assert cli.main(argv) == 0
    return out


def test_json_has_every_field_per_prompt_summary_and_category(bench_run):
    report = json.loads((bench_run / "r.json").read_text())
    assert report["schema"] == "playground.bench/1"
    facts = {"torch", "transformers", "python", "cpu", "torch_threads", "device_name",
             "load_average_at_start", "others_cpu_share"}
    assert facts <= set(report["environment"])
    assert report["models"]["pair"] == "tiny" and "peak_rss_bytes" in report["memory"]
    assert all("peak_rss_bytes" in run["summary"]["peak_memory"] for run in report["runs"])
    assert [(r["settings"]["gamma"], r["settings"]["temperature"]) for r in report["runs"]] == \
        [(1, 0.0), (1, 0.7), (3, 0.0), (3, 0.7)]
    for run in report["runs"]:
        assert [p["category"] for p in run["prompts"]] == ["coding", "qa"]
        assert set(run["categories"]) == {"coding", "qa"}
        assert SUMMARY_FIELDS <= set(run["summary"])
        greedy = run["settings"]["temperature"] == 0
        for p in run["prompts"]:
            assert PROMPT_FIELDS <= set(p)
            assert p["new_tokens"] > 0 and p["mean_accepted_tokens"] >= 1
            assert p["identical"] is (True if greedy else None)  # float32: greedy speculation is exact
            assert p["first_divergence"] is None and p["divergence_margin"] is None
            assert p["hf_generate_identical"] is (True if greedy else None)  # our baseline = transformers'
        assert run["summary"]["identical"] is (True if greedy else None)


def test_csv_has_a_row_per_prompt_category_and_setting(bench_run):
    rows = list(csv.DictReader((bench_run / "r.csv").open()))
    assert len(rows) == 4 * (2 + 2 + 1)  # settings x (prompts + categories + overall)
    assert {r["row"] for r in rows} == {"prompt", "category", "overall"}
    columns = {"gamma", "temperature", "divergence_margin_baseline", "divergence_margin_speculative"}
    assert columns <= set(rows[0])
    assert all(float(r["speedup"]) > 0 for r in rows)


def test_html_is_self_contained(bench_run):
    page = (bench_run / "r.html").read_text()
    assert page.startswith("<!doctype html>") and "Speedup vs lookahead" in page
    assert len(page) > 1_000_000 and "<script src=" not in page  # plotly.js embedded: opens offline


def test_outputs_leave_no_temporary_files(bench_run):
    assert sorted(p.name for p in bench_run.iterdir()) == ["r.csv", "r.html", "r.json"]


@pytest.mark.parametrize("args, message", [
    (["--gamma", "0"], "argument --gamma: gamma must be an integer in [1, 64], got 0"),
    (["--top-p", "1.5"], "argument --top-p: top_p must be in (0.0, 1.0]"),
    (["--temperature", "-1"], "argument --temperature: temperature must be in [0.0, 2.0]"),
    (["--repeats", "0"], "argument --repeats: must be an integer in [1, 1000], got 0"),
    (["--limit", "0"], "argument --limit: must be an integer in [1, 1000000], got 0"),
    (["--sweep", "gamma=1,x"], "argument --sweep: gamma takes integers"),
    (["--sweep", "gamma=2,99"], "argument --sweep: gamma must be an integer in [1, 64], got 99"),
    (["--gamma-max", "99"], "argument --gamma-max: gamma_max must be an integer in [1, 64], got 99"),
    (["--min-confidence", "1.5"], "argument --min-confidence: min_confidence must be in [0.0, 1.0]"),
    (["--sweep", "min_confidence=0,-1"], "argument --sweep: min_confidence must be in [0.0, 1.0]"),
    (["--sweep", "beta=1"], "argument --sweep: expected KEY=V1,V2,... with KEY one of draft, drafter, gamma, min_confidence"),
    (["--pair", "nope"], "argument --pair: "),
    (["--categories", "coding,poetry"], "argument --categories: unknown category poetry; this file has: wri"),
    (["--drafter", "magic"], "argument --drafter: invalid choice"),
    (["--png", "OUT/p.png"], "argument --png: the speedup-vs-gamma plot needs a gamma sweep"),
    (["--json", "OUT/missing/r.json"], "argument --json: folder"),
])
def test_bad_arguments_name_the_flag_and_write_nothing(tmp_path, capsys, args, message):
    args = [a.replace("OUT", str(tmp_path)) for a in args]
    outputs = ["--csv", str(tmp_path / "r.csv"), "--html", str(tmp_path / "r.html")]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--pair", "tiny", *outputs, *args] if "--pair" not in args else [*outputs, *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("old")
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_prompts_too_long_for_the_context_are_skipped_and_reported(tmp_path, capsys):
    out = tmp_path / "r.json"  # the tiny target holds 2048 byte tokens; summarization prompts are longer
    assert cli.main(SMALL_RUN + ["--categories", "summarization,qa", "--html", str(tmp_path / "r.html"),
                                 "--json", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert [p["category"] for p in run["prompts"]] == ["qa"] and run["summary"]["prompts"] == 1
    assert [s["category"] for s in run["skipped"]] == ["summarization"]
    assert "the target's context holds 2048" in run["skipped"][0]["reason"]
    assert "skipped" in capsys.readouterr().out


def test_prompt_lookup_drafter_and_transformers_prompt_lookup_run(tmp_path):
    out = tmp_path / "r.json"
    argv = SMALL_RUN + ["--drafter", "prompt_lookup", "--reference", "transformers", "--json", str(out)]
    assert cli.main(argv) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["summary"]["identical"] is True and run["summary"]["hf_assisted_tok_s"] > 0


# -- prompts -----------------------------------------------------------------------------------


def test_bundled_spec_bench_limit_is_per_category():
    prompts = load_prompts(limit=2)
    counts = {}
    for p in prompts:
        counts[p.category] = counts.get(p.category, 0) + 1
    assert len(counts) == 13 and set(counts.values()) == {2}
    coding = load_prompts(categories=["coding", "summarization"], limit=3)
    assert [p.category for p in coding] == ["coding"] * 3 + ["summarization"] * 3
    assert coding[0].id == "121" and coding[0].text.startswith("Develop a Python program")  # first turn only


def test_both_formats_and_clear_errors(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"question_id": 7, "category": "coding", "turns": ["first", "second"]}\n\n'
                    '{"id": "a", "category": "qa", "prompt": "What is 2+2?"}\n'
                    '{"id": "b", "prompt": "no category"}\n')
    prompts = load_prompts(path)
    assert [(p.id, p.category, p.text) for p in prompts] == [
        ("7", "coding", "first"), ("a", "qa", "What is 2+2?"), ("b", "uncategorized", "no category")]
    assert [p.id for p in load_prompts(path, categories=["qa"])] == ["a"]
    path.write_text('{"id": "a", "category": "qa", "text": "wrong key"}\n')
    with pytest.raises(ValueError, match=r"mixed.jsonl:1: expected Spec-Bench"):
        load_prompts(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_prompts(tmp_path / "missing.jsonl")


# -- divergence ---------------------------------------------------------------------------------


def event(emitted, tops, n_accepted=0, drafts=()):
    """A greedy StepEvent whose target rows have the given top-2 (token, prob) pairs."""
    return StepEvent(index=0, gamma=len(drafts), drafts=drafts, n_accepted=n_accepted, next_token=emitted[-1],
                     next_fate=TARGET, next_p=tops[-1][0][1], emitted=tuple(emitted), prompt_tokens=0, draft_s=0,
                     verify_s=0, overhead_s=0, next_top=tops[-1])


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_margins_come_from_the_row_that_chose_each_token():
    from playground.engine.events import ACCEPTED, REJECTED, DraftToken

    tie, clear = ((4, 0.5001), (9, 0.4999)), ((4, 0.9), (9, 0.1))
    drafts = (DraftToken(4, 0.9, 0.9, 1.0, None, ACCEPTED, top_p=clear),
              DraftToken(7, 0.9, 0.1, 0.0, None, REJECTED, top_p=clear))
    spec = [event([4, 4], [clear, tie], n_accepted=1, drafts=drafts)]  # an accepted draft, then the target's
    assert margins_by_position(spec) == pytest.approx([math.log(9), math.log(0.5001 / 0.4999)])
    base = [event([4], [clear]), event([9], [tie])]
    assert margin_at(base, 1) == pytest.approx(4e-4, rel=1e-3)  # a near-tie: rounding can flip it
    assert top2_margin(((1, 1.0), (2, 0.0))) == 100.0 and margin_at(base, 5) is None


def test_divergence_is_reported_with_both_margins(pair):
    target, draft, tokenizer = pair
    ids = encode_prompt(tokenizer, "def add(a, b):")
    config = SpecConfig(gamma=3, max_new_tokens=10)
    base = output_tokens(list(generate(target, ids, config)))
    spec = base[:4] + [(base[4] + 1) % 256] + base[5:]  # pretend speculation flipped token 4
    setup = Setup(target, draft, RunConfig(), eos=())
    fields = identity_fields(setup, ids, config, Run(base, 1.0), Run(spec, 1.0))
    assert fields["identical"] is False and fields["first_divergence"] == 4
    margins = fields["divergence_margin"]
    assert margins["baseline"] > 0 and margins["speculative"] == pytest.approx(margins["baseline"], abs=1e-3)
    assert margins["near_tie"] is (max(margins["baseline"], margins["speculative"]) < NEAR_TIE)


def test_near_tie_needs_every_measured_margin_below_the_threshold():
    assert near_tie([0.01, 0.3]) is True and near_tie([0.01, NEAR_TIE]) is False
    assert near_tie([None, 0.5]) is True and near_tie([None, None]) is None


def test_the_evidence_names_each_runs_token_and_the_targets_top_two_there(pair):
    """What the race and the lesson show: the same reruns as the bench's margins, with the tokens."""
    target, draft, tokenizer = pair
    from playground.engine.drafters import ModelDrafter

    ids = encode_prompt(tokenizer, "def add(a, b):")
    config = SpecConfig(gamma=3, max_new_tokens=10)
    base = output_tokens(list(generate(target, ids, config)))
    spec = base[:4] + [(base[4] + 1) % 256] + base[5:]  # pretend speculation flipped token 4
    made = []

    def make():
        made.append(ModelDrafter(draft))
        return made[-1]

    assert found(target, ids, config, make, (), (base, base), exact=True) is None and not made  # equal: no rerun
    d = found(target, ids, config, make, (), (base, spec), exact=True)
    assert len(made) == 1 and d.position == 4 and (d.plain.token, d.speculative.token) == (base[4], spec[4])
    assert d.plain.top[0][0] == base[4] and len(d.plain.top) == 2  # the plain run's forward chose its token
    assert d.plain.margin == pytest.approx(top2_margin(d.plain.top)) and d.plain.margin > 0
    assert d.tokens >= {base[4], spec[4]}
    assert d.exact and not d.excused  # float32: no margin excuses a divergence
    assert d.near_tie is (max(d.plain.margin, d.speculative.margin) < NEAR_TIE)
    short = found(target, ids, config, make, (), (base[:4], base), exact=False)  # one run ended at token 4
    assert short.position == 4 and short.plain.token is None and short.speculative.token == base[4]


# -- oracle, reference, summary --------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_oracle_drafter_yields_gamma_plus_one_tokens_per_call(pair, gamma):
    target, _, tokenizer = pair
    ids = encode_prompt(tokenizer, "Write a haiku about caches.")
    n = 4 * (gamma + 1)
    recording = greedy_continuation(target, ids, n)
    config = SpecConfig(gamma=gamma, max_new_tokens=n)
    events = list(generate(target, ids, config, OracleDrafter(ids + recording)))
    assert output_tokens(events) == recording
    assert [len(e.emitted) for e in events] == [gamma + 1] * 4
    assert summarize(events).mean_tokens_per_call == gamma + 1


def test_oracle_off_its_recording_proposes_nothing():
    oracle = OracleDrafter([1, 2, 3, 4, 5])
    assert oracle.propose([1, 2], 2, None, None).tokens == [3, 4]
    assert oracle.propose([1, 9], 2, None, None).tokens == []


def test_transformers_assisted_reference_drafts_exactly_gamma(pair):
    target, draft, tokenizer = pair
    ids = encode_prompt(tokenizer, "def add(a, b):")
    widths = []
    hook = target.register_forward_hook(lambda m, a, kw, out: widths.append(kw["input_ids"].shape[1]),
                                        with_kwargs=True)
    try:
        tokens, _ = hf_generate(target, ids, SpecConfig(gamma=3, max_new_tokens=20), (), assistant=draft)
    finally:
        hook.remove()
    assert len(tokens) == 20
    assert set(widths[1:-1]) == {4}  # after the prefill, each verification checks 3 drafts + 1
    before = dict(vars(draft.generation_config))
    with matched_assistant(draft, SpecConfig(gamma=5, adaptive=True, min_confidence=0.3)):
        config = draft.generation_config
        assert (config.num_assistant_tokens, config.num_assistant_tokens_schedule) == (5, "heuristic")
        assert config.assistant_confidence_threshold == 0.3
    assert dict(vars(draft.generation_config)) == before  # the model is left as it was


def test_adaptive_and_confidence_settings_reach_both_engines(tmp_path):
    argv = SMALL_RUN + ["--categories", "qa", "--max-new-tokens", "12", "--gamma", "2", "--adaptive",
                        "--gamma-max", "6", "--sweep", "min_confidence=0,0.5", "--reference", "transformers",
                        "--json", str(tmp_path / "a.json")]
    assert cli.main(argv) == 0
    runs = json.loads((tmp_path / "a.json").read_text())["runs"]
    assert [(r["settings"]["adaptive"], r["settings"]["gamma_max"], r["settings"]["min_confidence"])
            for r in runs] == [(True, 6, 0.0), (True, 6, 0.5)]
    assert all("hf_assisted_tok_s" in r["summary"] for r in runs)


def test_sweep_grid_and_errors():
    grid = Grid(RunConfig(max_new_tokens=8), parse_axes(["gamma=1,2", "temperature=0,0.7"]))
    configs = expand(grid)
    assert [(c.gamma, c.temperature) for c in configs] == [(1, 0.0), (1, 0.7), (2, 0.0), (2, 0.7)]
    assert all(c.max_new_tokens == 8 for c in configs)
    assert parse_axes(["gamma=1-3,8,2"]) == {"gamma": [1, 2, 3, 8]}  # ranges, duplicates dropped
    trees = expand(Grid(RunConfig(), parse_axes(["drafter=model,tree", "gamma=2,3"])))
    assert [(c.speculation, c.tree_depth, c.gamma) for c in trees][2:] == [("tree", 2, 2), ("tree", 3, 3)]
    with pytest.raises(SettingError, match="swept twice"):
        parse_axes(["gamma=1", "gamma=2"])
    with pytest.raises(SettingError, match="gamma: a range runs from low to high over at most 64 steps"):
        parse_axes(["gamma=1-500"])
    with pytest.raises(SettingError, match="ngram_max must be an integer in \\[4, 32\\], got 3") as raised:
        expand(Grid(RunConfig(), parse_axes(["ngram_min=4"])))
    assert raised.value.flag == "--ngram-max"  # the rule is broken by the flag's value (its default)
    with pytest.raises(SettingError, match="ngram_max must be an integer in \\[4, 32\\], got 3") as raised:
        expand(Grid(RunConfig(), parse_axes(["ngram_min=4", "ngram_max=3"])))
    assert raised.value.flag == "--sweep"


def test_summary_uses_medians_of_ratios_and_pooled_counts():
    def record(speedup, tokens, seconds, drafted, accepted, calls):
        return {"category": "x", "speedup": speedup, "new_tokens": tokens, "baseline_new_tokens": tokens,
                "speculative_seconds": seconds, "baseline_seconds": seconds * speedup, "drafted": drafted,
                "accepted": accepted, "tested": drafted, "target_calls": calls,
                "draft_seconds": drafted * 0.1, "verify_seconds": calls * 1.0, "baseline_calls": tokens,
                "baseline_call_seconds": tokens * 0.5, "cost_drafted": drafted, "cost_calls": calls,
                "cost_baseline_calls": tokens, "identical": True}
    s = summarize_records([record(0.5, 10, 1.0, 8, 4, 4), record(2.0, 30, 1.0, 8, 8, 4),
                           record(3.0, 20, 1.0, 8, 8, 4)])
    assert s["speedup"] == 2.0 and s["losing_prompts"] == 1  # median of per-prompt ratios; losses counted
    assert s["acceptance_rate"] == pytest.approx(20 / 24)
    assert s["mean_accepted_tokens"] == pytest.approx(60 / 12)
    # c = draft forward over one plain (baseline) step: 0.1 s over 0.5 s
    assert s["c"] == pytest.approx(0.2) and s["verify_cost"] == pytest.approx(2.0)
    assert s["identical"] is True and s["identical_prompts"] == 3


def test_the_prediction_with_prefill_keeps_each_runs_prefill_and_divides_the_decoding():
    """A plain run of 10 s: 4 s reading the prompt, 6 s decoding; the speculative run read it in 5 s
    (its draft read it too). A formula speedup of 2 on the decoding leaves 5 + 3 = 8 s, so 10 / 8 with
    the prefill; records without decode timings give none."""
    from playground.measure.bench.summary import with_prefill_speedup

    records = [{"baseline_seconds": 6.0, "baseline_decode_seconds": 3.0, "speculative_seconds": 5.0,
                "speculative_decode_seconds": 2.0},
               {"baseline_seconds": 4.0, "baseline_decode_seconds": 3.0, "speculative_seconds": 4.0,
                "speculative_decode_seconds": 2.0}]
    assert with_prefill_speedup(records, 2.0) == pytest.approx(10 / 8)
    assert with_prefill_speedup(records, 0.5) == pytest.approx(10 / 17)  # a loss shrinks the same way
    assert with_prefill_speedup([{"baseline_seconds": 6.0}], 2.0) is None


# -- GPU script, charts --------------------------------------------------------------------------


def test_gpu_oracle_cpu_smoke(capsys, tmp_path):
    assert gpu_oracle.main(["--cpu-smoke", "--repeats", "1", "--json", str(tmp_path / "o.json")]) == 0
    table = capsys.readouterr().out
    assert "| oracle | 3 |" in table and "| transformers assisted | 2 |" in table
    rows = json.loads((tmp_path / "o.json").read_text())["rows"]
    oracle = [r for r in rows if r["method"] == "oracle"]
    assert [(r["gamma"], r["tokens_per_call"]) for r in oracle] == [(1, 2.0), (2, 3.0), (3, 4.0)]


def test_gpu_paths_cpu_smoke(tmp_path):
    """The CUDA-paths script end to end on tiny CPU models: every check runs, greedy chain and
    tree reproduce autoregressive output in float32, and the loader's nf4 path is the one timed."""
    assert gpu_paths.main(["--cpu-smoke", "--json", str(tmp_path / "p.json")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    assert set(report["curves"]["tiny"]["v"]) >= {"1", "2", "9"} and report["curves"]["tiny"]["v"]["1"] == 1.0
    engine = report["engine"]["float32"]
    assert engine["chain_identical"] == [True] and engine["tree_identical"] == [True]
    assert engine["tree_nodes_per_call"] > engine["mean_gamma"]
    assert report["bitsandbytes"]["nf4"]["linear"] == "Linear4bit"


def test_gpu_paths_reports_a_failing_check_and_goes_on(tmp_path, monkeypatch):
    def broken(args):
        raise RuntimeError("no kernel for this device")

    monkeypatch.setattr(gpu_paths, "CHECKS", (("curves", broken), ("engine", gpu_paths.engine_on_gpu)))
    assert gpu_paths.main(["--cpu-smoke", "--checks", "curves,engine", "--json", str(tmp_path / "p.json")]) == 1
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["curves"]["error"] == "RuntimeError: no kernel for this device"
    assert report["engine"]["float32"]["chain_identical"] == [True]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="kaleido needs a local Chromium")
def test_speedup_vs_gamma_png(tmp_path):
    pytest.importorskip("kaleido")
    argv = SMALL_RUN + ["--categories", "qa", "--max-new-tokens", "6", "--sweep", "gamma=1,2",
                        "--png", str(tmp_path / "g.png"), "--json", str(tmp_path / "g.json")]
    assert cli.main(argv) == 0
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert charts.main([str(tmp_path / "g.json"), "--png", str(tmp_path / "again.png")]) == 0  # no re-run
    assert (tmp_path / "again.png").stat().st_size > 0


def test_nothing_heavy_at_import():
    import subprocess
    import sys

    code = "import sys, playground.bench, playground.measure.bench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_busy_machine_is_measured_as_other_processes_cpu():
    from playground.measure.bench.machine import busy_warning, others_cpu_share

    # 10 s of wall time on 2 cores: the machine was busy 10 CPU-seconds, 8 of them ours
    share = others_cpu_share((0.0, 100.0, 40.0), (10.0, 110.0, 48.0), cores=2)
    assert share == pytest.approx(0.1)
    assert "10% of the CPU" in busy_warning(share)
    assert busy_warning(0.01) is None


def test_profile_splits_each_run_into_verify_draft_and_overhead(capsys):
    from playground.measure.bench.profile import main

    assert main(["--pair", "tiny", "--max-new-tokens", "12", "--gamma", "3"]) == 0
    out = capsys.readouterr().out
    assert "autoregressive: 12 tokens" in out and "speculative, gamma=3: 12 tokens" in out
    assert out.count("verify") == 2 and out.count("overhead") == 2 and "predicted speedup=" in out
    with pytest.raises(SystemExit):
        main(["--pair", "tiny", "--gamma", "0"])  # the record's range, from the flag
    assert "gamma must be an integer in [1, 64]" in capsys.readouterr().err


def test_profile_of_a_tree_counts_draft_forwards_per_depth_and_nodes(capsys):
    from playground.measure.bench.profile import main

    assert main(["--pair", "tiny", "--max-new-tokens", "12", "--tree", "--tree-budget", "8", "--tree-depth", "3"]) == 0
    out = capsys.readouterr().out
    assert "tree, budget=8 depth=3 branching=2 width=0: 12 tokens" in out
    assert "forwards, one per depth" in out and "nodes)" in out and "c per depth=" in out
    with pytest.raises(SystemExit):
        main(["--pair", "tiny", "--tree", "--tree-depth", "0"])  # the record's range, from the flag
    assert "tree_depth must be an integer in [1, 64]" in capsys.readouterr().err


def test_draft_vocab_reaches_the_drafter_and_is_checked_against_the_draft(tmp_path, capsys):
    argv = SMALL_RUN + ["--draft-vocab", "120", "--json", str(tmp_path / "v.json")]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["config"]["draft_vocab"] == 120
    assert all(r["identical"] for r in report["runs"][0]["prompts"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(SMALL_RUN + ["--draft-vocab", "100000", "--json", str(tmp_path / "w.json")])
    assert exit_.value.code == 2
    assert "argument --draft-vocab: draft_vocab must be in [1, " in capsys.readouterr().err
    assert not (tmp_path / "w.json").exists()


def test_a_sweep_compares_drafts_and_each_cell_builds_the_drafter_it_names(tmp_path, monkeypatch, capsys):
    """Drafts compared for one target (issue 12): n-gram sizes of prompt lookup, then draft
    vocabularies of the draft model and the drafter kind. What is asserted is the drafter each
    timed run actually built, and that the report, the table and the figure name each draft."""
    from playground.engine import factory
    from playground.measure.bench import charts
    from playground.engine.drafters import ModelDrafter, PromptLookupDrafter

    built = []
    make = factory.make_drafter
    monkeypatch.setattr(factory, "make_drafter", lambda run, draft: built.append(make(run, draft)) or built[-1])

    out = tmp_path / "ngram.json"
    argv = SMALL_RUN + ["--drafter", "prompt_lookup", "--sweep", "ngram_max=2,3", "--json", str(out)]
    assert cli.main(argv) == 0
    assert {(d.min_ngram, d.max_ngram) for d in built} == {(1, 2), (1, 3)}
    runs = json.loads(out.read_text())["runs"]
    assert [r["settings"]["ngram_max"] for r in runs] == [2, 3]
    assert "ngram_max=2" in capsys.readouterr().out

    built.clear()
    out = tmp_path / "vocab.json"
    argv = SMALL_RUN + ["--sweep", "drafter=model,prompt_lookup", "draft_vocab=100,120", "--json", str(out),
                        "--html", str(tmp_path / "vocab.html")]
    assert cli.main(argv) == 0
    models = [d for d in built if isinstance(d, ModelDrafter)]
    assert {d.lm.head_rows for d in models} == {100, 120}
    assert any(isinstance(d, PromptLookupDrafter) for d in built)
    report = json.loads(out.read_text())
    assert [(r["settings"]["drafter"], r["settings"]["draft_vocab"]) for r in report["runs"]] == \
        [("model", 100), ("model", 120), ("prompt_lookup", 100), ("prompt_lookup", 120)]
    assert all(p["identical"] for r in report["runs"] for p in r["prompts"])  # greedy: lossless for every draft
    figure = charts.drafts_figure(report)
    assert list(figure.data[1].x) == ["drafter=model, draft_vocab=100", "drafter=model, draft_vocab=120",
                                      "drafter=prompt_lookup, draft_vocab=100",
                                      "drafter=prompt_lookup, draft_vocab=120"]
    assert "α" in figure.data[1].text[0] and "Drafts compared" in (tmp_path / "vocab.html").read_text()
    with pytest.raises(SystemExit):
        cli.main(SMALL_RUN + ["--sweep", "draft_vocab=100,100000", "--json", str(tmp_path / "x.json")])
    assert "argument --sweep: draft_vocab must be in [1, " in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_sweep_over_draft_quantizations_loads_each_draft_in_turn(tmp_path):
    """Another draft quantization is another draft: each cell runs with the draft it names, the
    target stays as it was, and greedy output stays the target's for each."""
    out = tmp_path / "q.json"
    assert cli.main(SMALL_RUN + ["--sweep", "draft_quantization=none,int4-cpu", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["draft"]["quantization"] for r in report["runs"]] == ["none", "int4-cpu"]
    assert [r["settings"]["draft_quantization"] for r in report["runs"]] == ["none", "int4-cpu"]
    assert report["models"]["target"]["quantization"] == "none"
    assert all(p["identical"] for r in report["runs"] for p in r["prompts"])


def test_tree_is_timed_beside_the_chain_in_one_run(tmp_path, capsys):
    out = tmp_path / "t.json"
    argv = SMALL_RUN + ["--tree", "--tree-budget", "8", "--tree-depth", "3", "--tree-branching", "2",
                        "--sweep", "gamma=2", "temperature=0,1", "--json", str(out), "--csv", str(tmp_path / "t.csv")]
    assert cli.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["config"]["tree"] == {"budget": 8, "depth": 3, "branching": 2, "width": 0}
    greedy, sampled = report["runs"]
    for record in greedy["prompts"] + sampled["prompts"]:
        assert record["tree_tok_s"] > 0 and record["tree_over_chain"] > 0
        assert 0 < record["tree_nodes"] <= 8 * record["tree_cost_calls"]
        assert record["tree_draft_forwards"] <= 3 * record["tree_cost_calls"]
    assert greedy["summary"]["tree_identical"] is True and sampled["summary"]["tree_identical"] is None
    assert greedy["summary"]["tree_verify_cost"] > 0 and 0 < greedy["summary"]["tree_nodes"] <= 8
    printed = capsys.readouterr().out
    assert "tree/chain" in printed and "v(nodes)" in printed
    assert "tree_over_chain" in (tmp_path / "t.csv").read_text().splitlines()[0]


def test_tree_needs_the_draft_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(SMALL_RUN + ["--tree", "--drafter", "prompt_lookup", "--json", str(tmp_path / "x.json")])
    assert "argument --tree: a tree is drafted by the draft model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(SMALL_RUN + ["--tree", "--tree-budget", "0"])
    assert "argument --tree-budget: tree_budget must be an integer in [1, 256], got 0" in capsys.readouterr().err
