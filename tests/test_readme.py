"""The README's library snippet runs as written (it uses tiny in-process models, no download)."""

import re
from pathlib import Path


def test_readme_engine_snippet_runs(capsys):
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    snippet = re.search(r"## The engine as a library.*?```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(snippet, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "alpha=" in out and "predicted speedup=" in out
