"""The source's shape, as DESIGN.md states it: each tab is a room of its own (no tab imports
another; shared widgets, examples and helpers live in modules every tab may use), and the
measurement and math a tab shows live below the UI, not in a view module."""

import ast
from pathlib import Path

UI = Path(__file__).parents[1] / "playground" / "ui"


def imported(path: Path) -> set[str]:
    """The playground.ui modules a file imports (relative imports, any depth in the file)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
    return names


def test_no_tab_imports_another_and_only_the_app_imports_tabs():
    for path in UI.glob("*.py"):
        tabs = {name for name in imported(path) if name.startswith("tab_")}
        if path.name == "__init__.py":
            continue  # the app: builds every tab and wires what one hands to another
        assert not tabs, f"{path.name} imports {sorted(tabs)}"


def test_the_check_can_fail():
    """The walk sees a tab importing another, at module level or inside a function."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tab_x.py"
        path.write_text("def f():\n    from .tab_race import EXAMPLES\n    from . import tab_sweep\n")
        assert {"tab_race", "tab_sweep"} <= imported(path)


def test_ui_modules_do_not_measure_or_time_on_their_own():
    """Threads for a measurement, timing and the speedup formulas come from bench/ and sampling.py."""
    for path in UI.glob("*.py"):
        text = path.read_text()
        assert "set_num_threads" not in text, path.name
        assert "def expected_speedup" not in text and "def sloped_speedup" not in text, path.name
