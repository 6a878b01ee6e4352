"""The README and docs/ hold to what they promise: the README stays short and its test command is the
one CI runs, every command on every page is accepted by the program it calls (flags and settings
checked as a real run checks them, no model loaded, nothing installed or measured), every Python
snippet compiles and the ones on tiny in-process models run as written, and every relative link
points at a file (and a heading) that exists."""

import argparse
import importlib
import importlib.util
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str]]:
    """Fenced code blocks as (language, body)."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", text)


def test_readme_is_short_and_its_test_command_is_the_one_ci_runs():
    readme = README.read_text()
    assert len(readme.splitlines()) <= 200, "the README is a first read: move detail into docs/"
    test_command = ("python3 -m venv .venv && . .venv/bin/activate && pip install -q -r requirements-dev.txt "
                    "&& python -m pytest")
    assert f"```bash\n{test_command}\n```" in readme
    assert f"\n  {test_command}\n" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's, verbatim
    app_command = "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && python app.py"
    assert f"```bash\n{app_command}\n```" in readme


# --- links ---------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    for line in prose(page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            yield base if n == 0 else f"{base}-{n}"


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))  # a link inside code is not a link
    return [m.group(1) for m in LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in set(anchors(file)):
            broken.append(f"{target}: no such heading in {file.relative_to(ROOT)}")
    assert not broken, broken


def test_the_docs_are_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    assert not [p.name for p in PAGES[1:] if p.resolve() not in linked]


# --- commands ------------------------------------------------------------------------------------------

PYTHON = {"python", "python3", ".venv/bin/python"}
KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "time"}
SEPARATORS = {";", "&&", "||", "|", "(", ")", "&", ";;"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
COMMAND_LINE = re.compile(r"\s*([A-Za-z_]\w*=|(python3?|\.venv/bin/python|bash|pip|if|for|while|then|do|else|time|!)"
                          r"(\s|$))")  # a line that starts with a command (or an assignment)


def segments(line: str) -> list[list[str]]:
    """A shell line split into simple commands, shell keywords and separators dropped."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    out, current = [], []
    for token in lex:
        if token in SEPARATORS:
            out.append(current)
            current = []
        elif not current and token in KEYWORDS:
            continue
        else:
            current.append(token)
    return [s for s in out + [current] if s]


def commands(page: Path) -> list[tuple[str, list[str]]]:
    """Every command a page shows: lines of its shell (and untagged) blocks, indented code lines and
    inline code that start with a command, with the page's variables (`P="..."`, a for loop's first
    value) filled in. Each as (the line, argv of one simple command)."""
    text = page.read_text()
    lines = []
    for language, body in blocks(text):
        if language in ("", "bash", "sh", "shell", "console"):
            lines += re.sub(r"\\\n\s*", " ", body).splitlines()
    rest = prose(text)
    lines += [m.group(1) for m in re.finditer(r"^ {4,}(python3? .*)$", rest, re.M)]
    lines += [" ".join(m.group(1).split()) for m in re.finditer(r"`([^`]+)`", rest)
              if re.match(r"\s*(python3? (-m playground|app\.py|scripts/)|bash )", m.group(1))]
    variables: dict[str, str] = {}
    found = []
    for line in lines:
        for m in re.finditer(r"\bfor (\w+) in (\S+)", line):
            variables[m.group(1)] = m.group(2)
        if not COMMAND_LINE.match(line):  # a tree drawn in a block, a program's output
            continue
        line = re.sub(r"\$\{?(\w+)\}?", lambda v: variables.get(v.group(1), v.group(0)), line)
        for argv in segments(line):
            while argv and ASSIGNMENT.match(argv[0]):
                name, _, value = argv.pop(0).partition("=")
                if not argv:
                    variables[name] = value
            if argv and (argv[0] in PYTHON or argv[0] in ("bash", "pip")):
                found.append((line.strip(), argv))
    return found


class Parsed(Exception):
    """Raised in place of running a command once its arguments have parsed."""


def parse_only(monkeypatch):
    parse = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        raise Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)


def check_bench(argv: list[str]) -> None:
    from playground.measure.bench import cli
    from playground.measure.bench.sweep import SettingError

    args = cli.build_parser().parse_args(argv)
    args.argv = argv
    try:
        cli.make_plan(args)
    except SettingError as error:
        raise AssertionError(f"argument {error.flag}: {error}") from None


def check_main(main, argv: list[str], monkeypatch) -> None:
    """Call a command's main with argparse stopped right after parsing: nothing runs."""
    with monkeypatch.context() as m:
        parse_only(m)
        with pytest.raises(Parsed):
            main(argv)


def check_script(path: str, argv: list[str], monkeypatch) -> None:
    assert (ROOT / path).is_file(), f"{path}: no such file"
    with monkeypatch.context() as m:
        if path == "app.py":  # the page is built at import: not needed to parse the flags
            import playground.app.demo

            m.setattr(playground.app.demo, "build_demo", lambda *a, **k: None)
        module = runpy.run_path(str(ROOT / path), run_name="docs_check")
    check_main(module["main"], argv, monkeypatch)


MAINS = {"playground.models": "playground.models.cli", "playground.serve": "playground.serve.__main__"}


def check(argv: list[str], monkeypatch) -> None:
    if argv[0] == "bash":
        assert len(argv) > 1 and (ROOT / argv[1]).is_file(), f"{argv[1:]}: no such script"
        return
    if argv[0] == "pip" or argv[1:3] == ["-m", "pip"]:
        files = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-r", "--requirement")]
        assert all((ROOT / f).is_file() for f in files), files
        return
    assert len(argv) > 1, "python with nothing to run"
    if argv[1] == "-c":
        compile(argv[2], "<python -c>", "exec")
        return
    if argv[1] != "-m":
        check_script(argv[1], argv[2:], monkeypatch)
        return
    module, rest = argv[2], argv[3:]
    if module == "venv":
        return
    if module == "pytest":
        paths = [a.split("::")[0] for a in rest if a.startswith("tests")]
        assert all((ROOT / p).exists() for p in paths), paths
        return
    assert module.startswith("playground"), f"{module}: not this project's command"
    if not rest:  # the command named, as prose names it (some need a subcommand): it exists
        assert importlib.util.find_spec(module) is not None, f"{module}: no such module"
        return
    if rest in (["--help"], ["-h"]):
        rest = []  # the help's own parser is the one checked below, with no flags
    if module == "playground.bench":
        check_bench(rest)
        return
    check_main(importlib.import_module(MAINS.get(module, module)).main, rest, monkeypatch)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_on_the_page_parses(page, tmp_path, monkeypatch):
    """As on a fresh clone: the optional llama.cpp extra not built, run from a folder with out/ and
    assets/ for the outputs commands write. It checks the commands, not this machine."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "assets").mkdir()
    failures = []
    for line, argv in commands(page):
        try:
            check(argv, monkeypatch)
        except (AssertionError, SystemExit, Exception) as error:  # noqa: B014 - argparse exits
            failures.append(f"{line}\n    {' '.join(argv)}\n    -> {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_the_pages_show_the_commands_that_matter():
    """The check above must see the commands it guards (a page rewritten into prose would pass it)."""
    seen = {page.name: {" ".join(argv[:3]) for _, argv in commands(page)} for page in PAGES}
    assert "python app.py" in seen["README.md"] and "python -m pytest" in seen["README.md"]
    assert "python -m playground.bench" in seen["bench.md"] & seen["benchmarks.md"] & seen["runners.md"]
    assert "python -m playground.serve" in seen["served.md"] and "python -m playground.models" in seen["models.md"]


# --- Python snippets -----------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_snippet_compiles(page):
    for language, body in blocks(page.read_text()):
        if language == "python":
            compile(body, str(page), "exec")


def test_library_snippet_runs(capsys):
    """docs/library.md's first snippet runs as written (tiny in-process models, no download)."""
    page = (ROOT / "docs" / "library.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert "tiny_pair" in snippet
    exec(compile(snippet, "docs/library.md", "exec"), {})
    out = capsys.readouterr().out
    assert "alpha=" in out and "predicted speedup=" in out


def test_tree_snippet_runs(capsys):
    """docs/trees.md's snippet runs as written on the tiny pair and prints the tree it drafted."""
    page = (ROOT / "docs" / "trees.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert "tiny_pair" in snippet
    exec(compile(snippet, "docs/trees.md", "exec"), {})
    assert "nodes drafted" in capsys.readouterr().out


# --- docs/benchmarks.md --------------------------------------------------------------------------------

def test_benchmark_page_commands_are_the_reproduce_script_and_each_parses(tmp_path, monkeypatch):
    """docs/benchmarks.md shows docs/reproduce.sh verbatim, and every command in it is accepted by
    the CLI it calls (flags and settings checked as a real run checks them, no model loaded). It
    checks the commands, not this machine: it passes where the optional llama.cpp extra is absent."""
    from playground.measure.hardware import lab_timing
    from playground.measure.bench import cli, profile
    from playground.measure.hardware import cpu_kernels, gpu_oracle, gpu_paths, gpu_runners

    script = (ROOT / "docs" / "reproduce.sh").read_text()
    page = (ROOT / "docs" / "benchmarks.md").read_text()
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


def test_benchmark_page_starts_with_today_and_keeps_the_rest_as_dated_history():
    """docs/benchmarks.md reads current first: the default's tables today, then the method, then the
    earlier tables under a dated History heading, each section dated."""
    headings = [line for line in (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
                if re.match(r"##? ", line)]
    titles = [h.lstrip("# ") for h in headings if h.startswith("## ")]
    assert titles[0].startswith("Today"), titles
    history = next(i for i, t in enumerate(titles) if t.startswith("History"))
    assert re.search(r"\d{4}-\d\d-\d\d", titles[0]) and re.search(r"\d{4}-\d\d-\d\d", titles[history])
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    dated = re.findall(r"^### (.*)$", text[text.index("## " + titles[history]):], re.M)
    assert dated and all(re.search(r"\d{4}-\d\d-\d\d", t) for t in dated), dated
