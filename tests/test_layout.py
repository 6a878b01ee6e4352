"""The source's shape, as docs/design.md states it: folders are the layers and data flows one way.

    config  →  engine, models, serve  →  export  →  measure (bench → teach → hardware)  →  app

config imports nothing of playground; engine, models and serve import config and never each
other; export reads the configuration and the model packs; measure's rooms import the layers below
and each other only downward (teach reads the bench's runs, hardware times with both); the app
imports everything below it. Inside the app a tab
imports app/shared and the layers below, never another tab; only app/demo.py builds the tabs.
Commands (`cli.py`, `__main__.py`, playground/bench.py) sit on top of the layer they serve and may
import any layer but the app. The test walks every import in every module, at module level or
inside a function, and fails on an upward import or an import cycle, between packages or within one
(an import inside a function closes a cycle as surely as one at the top: it only postpones it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "playground"
RANK = {"config": 0, "engine": 1, "models": 1, "serve": 1, "export": 2, "measure": 3,
        "measure.bench": 3, "measure.teach": 4, "measure.hardware": 5, "app": 6}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = ["playground", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = PACKAGE) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for every playground import in the file."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] == "playground":
                found += [(f"{base}.{a.name}", id(node) in top) for a in node.names] if not node.module or \
                    (root / Path(*base.split(".")[1:])).is_dir() else [(base, id(node) in top)]
        elif isinstance(node, ast.Import):
            found += [(a.name, id(node) in top) for a in node.names if a.name.split(".")[0] == "playground"]
    return found


def module_of(name: str, root: Path = PACKAGE) -> str:
    """The module an imported name lives in: the name itself for a module or package, else its parent
    (`from playground.engine.runners import doubled` reads the runners package)."""
    where = root.joinpath(*name.split(".")[1:])
    return name if where.is_dir() or where.with_suffix(".py").exists() else name.rsplit(".", 1)[0]


def layer(module: str) -> str | None:
    """The layer a module sits in; measure's rooms are layers of their own."""
    parts = module.split(".")
    room = ".".join(parts[1:3])
    if room in RANK:
        return room
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def is_command(module: str) -> bool:
    return module == "playground.bench" or module.split(".")[-1] in ("cli", "__main__")


def tab(module: str) -> str | None:
    """The tab folder of an app module (None for app/shared, app/demo and the package)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "app" and parts[2] != "shared" else None


def problems(root: Path = PACKAGE) -> list[str]:
    """Every upward import, tab-to-tab import and import cycle under root."""
    found, graph = [], {}
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        graph[me] = set()
        for other, _ in imports(path, root):
            if other == "playground" or me.startswith(module_of(other, root) + "."):
                continue  # a module reading its own package: Python has run the package first
            graph[me].add(other)
            if other.startswith(me + "."):
                continue  # a package importing its own module: no layer crossed
            mine, theirs = layer(me), layer(other)
            if is_command(me):
                if theirs == "app" and mine != "app":
                    found.append(f"{me} (a command) imports the app: {other}")
                elif mine and theirs and RANK[theirs] > RANK[mine]:
                    found.append(f"{me} (a command of {mine}) imports upward: {other} ({theirs})")
            elif mine and theirs and RANK[theirs] > RANK[mine]:
                found.append(f"{me} ({mine}) imports upward: {other} ({theirs})")
            elif mine and theirs and mine != theirs and RANK[theirs] == RANK[mine]:
                found.append(f"{me} ({mine}) imports its sibling layer: {other} ({theirs})")
            elif mine is None and me != "playground" and theirs is not None and not is_command(me):
                found.append(f"{me} sits outside the layers and imports {other}")
            if tab(me) and tab(other) and tab(me) != tab(other):
                found.append(f"{me} (tab {tab(me)}) imports another tab: {other}")
            if tab(other) and me.startswith("playground.app.") and not tab(me) and me != "playground.app.demo":
                found.append(f"{me} imports a tab ({other}); only app/demo.py builds the tabs")
    return found + cycles(graph) + layer_cycles(graph)


def layer_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Cycles between layers (a package, or a room of measure/), commands included: two floors that
    reach each other, by however many imports, leave no way to tell which one is lower."""
    floors = {}
    for me, others in graph.items():
        for other in others:
            mine, theirs = layer(me), layer(other)
            if mine and theirs and mine != theirs:
                floors.setdefault(f"playground.{mine}", set()).add(f"playground.{theirs}")
    return [f.replace("import cycle", "layer cycle") for f in cycles(floors)]


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Cycles among modules' imports, at module level or in a function: one reported per cycle the
    walk closes, so every circle shows at least once."""
    found, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            nxt = nxt if nxt in graph else nxt.rsplit(".", 1)[0]
            if state.get(nxt) == "open":
                found.append(" → ".join(trail[trail.index(nxt):] + [nxt]) if nxt in trail else nxt)
            elif nxt in graph and nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return [f"import cycle: {c}" for c in found]


def test_every_import_flows_down_the_layers_and_no_tab_imports_another():
    assert problems() == []


def test_the_walk_fails_on_an_upward_import_a_tab_import_and_a_cycle(tmp_path):
    """The check can fail: a fake tree with each fault, at module level and inside a function."""
    files = {
        "config.py": "def f():\n    from playground.engine import generate\n",
        "engine/__init__.py": "", "engine/a.py": "from playground.engine import b\n",
        "engine/b.py": "from playground.engine.a import x\n",
        "models/__init__.py": "", "models/load.py": "from playground.engine.a import x\n",
        "measure/__init__.py": "", "measure/bench/runs.py": "from ...app.shared import flow\n",
        "measure/bench/sweep.py": "def h():\n    from playground.measure.teach import points\n",
        "measure/teach/__init__.py": "", "measure/teach/points.py": "from playground.models.load import x\n",
        "app/__init__.py": "", "app/shared/__init__.py": "", "app/shared/flow.py": "",
        "app/race/__init__.py": "", "app/race/tab.py": "def g():\n    from playground.app.lab import tab\n",
        "models/scan/__init__.py": "", "models/scan/cli.py": "def e():\n    from playground.measure.teach import points\n",
        "app/lab/__init__.py": "", "app/lab/tab.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = "\n".join(problems(tmp_path))
    assert "playground.config (config) imports upward: playground.engine.generate" in found
    assert "playground.measure.bench.runs (measure.bench) imports upward: playground.app.shared.flow" in found
    assert ("playground.measure.bench.sweep (measure.bench) imports upward: playground.measure.teach.points "
            "(measure.teach)") in found
    assert "layer cycle: playground.measure.teach → playground.models → playground.measure.teach" in found
    assert "playground.models.load (models) imports its sibling layer" in found
    assert "playground.app.race.tab (tab race) imports another tab: playground.app.lab.tab" in found
    assert "import cycle: playground.engine.a → playground.engine.b → playground.engine.a" in found
    assert ("playground.models.scan.cli (a command of models) imports upward: playground.measure.teach.points "
            "(measure.teach)") in found


def test_the_walk_fails_on_a_cycle_within_a_package_closed_inside_functions(tmp_path):
    """A circle inside one layer, each step a lazy import (as runner choice → cache model → runners
    was): still a cycle. A module reading its own package, which Python runs first, is none."""
    files = {
        "config.py": "", "engine/__init__.py": "",
        "engine/cache.py": "from playground.engine.runners import make\n",
        "engine/runners/__init__.py": "def make():\n    from playground.engine.runners.pick import best\n",
        "engine/runners/pick.py": "def best():\n    from playground.engine.cache import Cache\n",
        "engine/runners/eager.py": "from playground.engine.runners import make\n",  # its own package: fine
        "engine/x.py": "def f():\n    from playground.engine import y\n",
        "engine/y.py": "def g():\n    from playground.engine.x import f\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = problems(tmp_path)
    assert ("import cycle: playground.engine.cache → playground.engine.runners → playground.engine.runners.pick "
            "→ playground.engine.cache") in found
    assert "import cycle: playground.engine.x → playground.engine.y → playground.engine.x" in found
    assert not [f for f in found if "eager" in f] and len(found) == 2


MAX_PARAMETERS = 8


def crowded(root: Path = PACKAGE, most: int = MAX_PARAMETERS) -> list[str]:
    """Every function (or lambda) under root taking more than `most` parameters, positional, keyword-only,
    *args and **kwargs each counted once, a method's self or cls not: past that, some of them belong
    together in one value."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                named = [p.arg for p in a.posonlyargs + a.args]
                count = len(named) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                count -= bool(named) and named[0] in ("self", "cls")
                if count > most:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {getattr(node, 'name', 'lambda')} "
                                 f"takes {count} parameters")
    return found


def test_no_function_takes_more_than_eight_parameters():
    assert crowded() == []


def test_the_parameter_count_can_fail(tmp_path):
    (tmp_path / "wide.py").write_text("class A:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n\n"
                                      "def f(a, b, c, d, e, f, g, *, h, **rest):\n    pass\n")
    assert crowded(tmp_path) == ["wide.py:5 f takes 9 parameters"]


def test_ui_modules_do_not_measure_or_time_on_their_own():
    """Threads for a measurement, timing and the speedup formula come from measure/ and the engine."""
    for path in (PACKAGE / "app").rglob("*.py"):
        text = path.read_text()
        assert "set_num_threads" not in text, path.name
        assert "def expected_speedup" not in text and "def sloped_speedup" not in text, path.name


MAX_LINES = 400  # a file a reader finishes in one sitting (issue 54)


def long_files(root: Path = PACKAGE, most: int = MAX_LINES) -> list[str]:
    """Every module under root longer than `most` lines."""
    return [f"{path.relative_to(root)}: {n} lines" for path in sorted(root.rglob("*.py"))
            for n in [len(path.read_text().splitlines())] if n > most]


def test_no_file_in_playground_is_over_400_lines():
    assert long_files() == []


def test_the_line_count_can_fail(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "short.py").write_text("x = 1\n" * 400)
    assert long_files(tmp_path) == ["long.py: 401 lines"]
