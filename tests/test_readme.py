"""The README's library snippet runs as written (it uses tiny in-process models, no download)."""

import re
from pathlib import Path


def test_readme_engine_snippet_runs(capsys):
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    snippet = re.search(r"## The engine as a library.*?```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(snippet, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "alpha=" in out and "predicted speedup=" in out


def test_benchmark_page_commands_are_the_reproduce_script_and_each_parses(tmp_path, monkeypatch):
    """docs/benchmarks.md shows docs/reproduce.sh verbatim, and every command in it is accepted by
    the CLI it calls (flags and settings checked as a real run checks them, no model loaded). It
    checks the commands, not this machine: it passes where the optional llama.cpp extra is absent."""
    import shlex
    import sys

    from playground.measure.hardware import lab_timing
    from playground.measure.bench import cli, profile
    from playground.measure.hardware import cpu_kernels, gpu_oracle, gpu_paths, gpu_runners

    root = Path(__file__).parents[1]
    script = (root / "docs" / "reproduce.sh").read_text()
    page = (root / "docs" / "benchmarks.md").read_text()
    block = re.search(r"## Reproduce.*?is these commands.*?```bash\n(.*?)```", page, re.S).group(1)
    assert block == script[script.index("mkdir -p out"):]
    lines = re.sub(r"\\\n\s*", "", script)
    for variable, value in (("$EARLIER", "--target-quantization none --draft-quantization nf4"), ("$tq", "nf4"), ("$dq", "none"), ("$n", "65536"), ("$t", "0.7")):
        lines = lines.replace(variable, value)
    calls = [shlex.split(line.split("python -m ", 1)[1].split("|")[0].split(";")[0])
             for line in lines.splitlines() if "python -m playground" in line]
    assert [c[0] for c in calls].count("playground.bench") >= 6
    assert [c[0] for c in calls][-3:] == ["playground.measure.hardware.gpu_oracle", "playground.measure.hardware.gpu_paths",
                                          "playground.measure.hardware.gpu_runners"]
    assert ["playground.serve", "setup", "llamacpp"] in calls  # the optional extra, before its runs
    calls = [c for c in calls if c[0] != "playground.serve"]  # a setup, not a measurement
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as on a fresh clone: the extra not built
    monkeypatch.chdir(tmp_path)  # the output folders the script writes to, as after its `mkdir -p out`
    (tmp_path / "out").mkdir()
    (tmp_path / "assets").mkdir()
    for module, *argv in calls:
        if module == "playground.bench":
            args = cli.build_parser().parse_args(argv)
            args.argv = argv
            cli.make_plan(args)
        else:
            {"playground.measure.bench.profile": profile, "playground.measure.hardware.gpu_oracle": gpu_oracle,
             "playground.measure.hardware.gpu_paths": gpu_paths, "playground.measure.hardware.lab_timing": lab_timing,
             "playground.measure.hardware.gpu_runners": gpu_runners, "playground.measure.hardware.cpu_kernels": cpu_kernels}[module].options(argv)
