"""The package layout's rules: no import circles, the trainer side stands apart, the package root
holds only the foundation (and the entry points and old import paths), and no module imports
another's private name.

The import graph is read from the source (every ``import`` and ``from ... import`` inside the
package, at module level or inside a function, since a late import is still a dependency);
imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "forensics"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool, modules: set[str], type_only: bool = False) -> set[str]:
    """The package modules that ``module`` imports (a name imported from a package counts as
    the submodule when one of that name exists, else as the package); ``type_only``: with the
    imports under ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    package = module if is_pkg else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "forensics")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "forensics":
                return
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        edges = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", set(files), type_only)
        # a module importing its own parent package is how relative imports resolve, not a cycle
        graph[name] = {m for m in edges if m in files and m != name and not name.startswith(m + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


# What each part may import (besides the root modules everything stands on: schema, config,
# errors). The trainer side runs inside training jobs and must not pull in the analyzer.
LAYERS = {
    "forensics.trainer": set(),
    "forensics.io": set(),
    "forensics.analysis": {"forensics.io"},
    "forensics.report": {"forensics.analysis", "forensics.io"},
    "forensics.verdicts": {"forensics.analysis", "forensics.io", "forensics.report"},
    "forensics.fleet": {"forensics.analysis", "forensics.io", "forensics.report", "forensics.verdicts"},
}
ROOT_MODULES = {"forensics", "forensics.schema", "forensics.config", "forensics.errors",
                "forensics.records"}  # every part's dataclasses, the trainer side's included
#: What the package root holds: the foundation above, what faces the user (the command line, its
#: progress bars, ``python -m forensics``) and the re-exports kept for old import paths; every other
#: module lives in the part that uses it.
ROOT_FILES = {"__init__", "__main__", "schema", "config", "errors", "records", "cli", "progress",
              "writer", "torch_helpers"}
#: The parts (sub-packages) of the root: the layers above, the live side and the old import paths.
ROOT_PACKAGES = {p.rpartition(".")[2] for p in LAYERS} | {"live", "integrations"}
#: The re-exports of old import paths: each imports its names from the trainer side, nothing else.
REEXPORTS = {"forensics.writer", "forensics.torch_helpers", "forensics.integrations.transformers"}


def test_progress_imports_no_part() -> None:
    """The progress display (root, user-facing) stands on nothing but the root modules."""
    assert import_graph()["forensics.progress"] <= ROOT_MODULES


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_parts_import_only_what_lies_below(part: str) -> None:
    allowed = LAYERS[part] | {part}
    wrong = []
    for module, deps in import_graph().items():
        if module != part and not module.startswith(part + "."):
            continue
        for dep in deps:
            if dep in ROOT_MODULES:
                continue
            if not any(dep == a or dep.startswith(a + ".") for a in allowed):
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_root_modules_import_no_part() -> None:
    graph = import_graph()
    for module in ROOT_MODULES - {"forensics"}:
        assert graph[module] <= ROOT_MODULES, module


def test_the_package_root_holds_only_the_foundation() -> None:
    """The root holds the modules everything stands on, the user's entry points and the old
    import paths; a module that serves one part lives in that part (``io/lean.py``, the command
    line's import guard; ``report/cost.py``, the cost in words)."""
    assert {p.stem for p in PACKAGE.glob("*.py")} == ROOT_FILES
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == ROOT_PACKAGES
    assert {f"forensics.{m}" for m in ROOT_FILES if not m.startswith("_")} >= ROOT_MODULES - {"forensics"}


def test_old_import_paths_only_re_export() -> None:
    graph = import_graph()
    for module in REEXPORTS:
        assert graph[module] and all(d.startswith("forensics.trainer") or d == "forensics.live.transformers"
                                     for d in graph[module]), module


def private_imports(root: Path) -> list[str]:
    """``path:line name`` of every private name (``_x``, not a dunder) a module under ``root``
    imports from another module of the package (``from .x import _y``)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            if not node.level and (node.module or "").split(".")[0] != root.name:
                continue  # another package's: its own business
            out += [f"{path.relative_to(root)}:{node.lineno} {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    pkg = tmp_path / "forensics"
    pkg.mkdir()
    (pkg / "a.py").write_text("from .b import _hidden, shown\nfrom .c import value as _alias\n"
                              "from os import _exit\nfrom __future__ import annotations\n")
    (pkg / "b.py").write_text("from forensics.a import _x\n")
    assert private_imports(pkg) == ["a.py:1 _hidden", "b.py:1 _x"]


def test_no_module_imports_another_modules_private_name() -> None:
    """What a module shares it names without an underscore: a private name is its own, free to
    change (a helper two modules need is public in the one that owns it)."""
    assert private_imports(PACKAGE) == []


def test_trainer_side_loads_without_the_analyzer() -> None:
    code = ("import sys, forensics.trainer.writer, forensics.writer; "
            "print(sorted(m for m in sys.modules if m.startswith(('forensics.analysis', "
            "'forensics.io', 'forensics.report', 'forensics.verdicts', 'forensics.live'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- one declaration per fact: what a tracker reads is its ``requires`` ---------------------------
def _tracker_modules() -> list[tuple[str, str]]:
    import inspect

    from forensics.analysis.trackers import TRACKERS

    return [(name, inspect.getsource(inspect.getmodule(cls))) for name, cls in TRACKERS.items()]  # type: ignore[arg-type]


def test_every_tracker_reads_canonical_names_it_declares() -> None:
    """``requires`` names canonical metrics only (a trainer's own spellings are the schema's
    aliases), the columns a tracker starts on are among them, and every column its module reads
    by name (``batch.col("x")``, ``batch.has("x")``, ``batch.logged("x")``) is declared."""
    from forensics.analysis.trackers import TRACKERS
    from forensics.schema import METRICS

    for name, source in _tracker_modules():
        cls = TRACKERS[name]
        assert set(cls.requires) <= set(METRICS), (name, set(cls.requires) - set(METRICS))
        assert set(cls.starts_on) <= set(cls.requires), name
        read = set(re.findall(r"\.(?:col|has|logged)\(\"([a-z_]+)\"\)", source)) - {"step"}
        assert read <= set(cls.requires), (name, read - set(cls.requires))


def test_what_the_schema_says_a_tracker_reads_is_its_requires() -> None:
    from forensics.analysis.catalogue import metrics_read_by, readers
    from forensics.analysis.trackers import TRACKERS
    from forensics.schema import METRICS

    for name, cls in TRACKERS.items():
        assert metrics_read_by(name) == cls.requires
        assert {m for m in METRICS if name in readers(m)} == set(cls.requires), name


# -- the diagnosis computed once ------------------------------------------------------------------
DIAGNOSIS = {f"forensics.analysis.diagnosis.{m}" for m in ("timeline", "recommendations", "series", "cost", "diagnose")}


def test_the_analysis_only_serialises_its_diagnosis() -> None:
    """``Analysis`` (``to_dict``) imports none of the modules that compute the diagnosis: it is
    computed once, in ``Scan.finish``, and stored; so no circle through the result either, not
    even a type-only one."""
    assert not import_graph(type_only=True)["forensics.analysis.result"] & DIAGNOSIS
    assert not [c for c in cycles(import_graph(type_only=True)) if "forensics.analysis.result" in c]


def test_reports_import_nothing_from_the_trackers() -> None:
    """A renderer reads the analysis (or its saved dict), never a tracker's code or registry."""
    graph = import_graph(type_only=True)
    wrong = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("forensics.report")
             for d in deps if d.startswith("forensics.analysis.trackers")]
    assert wrong == []


def test_renderers_do_not_compute_the_diagnosis() -> None:
    graph = import_graph(type_only=True)
    # the timeline's reader of a saved analysis is shared (the cost in words is report/cost.py)
    computing = DIAGNOSIS - {"forensics.analysis.diagnosis.timeline"}
    wrong = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("forensics.report")
             for d in deps if d in computing]
    assert wrong == []


# -- the floors of analysis/: each imports only the floors below it ---------------------------------
#: Floor of each module of ``forensics.analysis`` (a package's modules share its floor), lowest first.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("forensics.analysis.stats",),
    ("forensics.analysis.findings", "forensics.analysis.spans", "forensics.analysis.context",
     "forensics.analysis.store", "forensics.analysis.trainer_keys", "forensics.analysis.stream",
     "forensics.analysis.ranges"),
    ("forensics.analysis.trackers",),
    ("forensics.analysis.diagnosis",),
    ("forensics.analysis.result", "forensics.analysis.catalogue"),
    ("forensics.analysis.engine",),
)


def _floor(module: str) -> int | None:
    for level, homes in enumerate(FLOORS):
        if any(module == h or module.startswith(h + ".") for h in homes):
            return level
    return None


def test_every_analysis_module_has_a_floor() -> None:
    modules = [m for m in import_graph() if m.startswith("forensics.analysis.")]
    assert [m for m in modules if _floor(m) is None] == []


def test_analysis_floors_import_only_downward() -> None:
    """stats < the ground (findings, context ...) < trackers < diagnosis < result < engine: a
    statistic knows no tracker, a tracker no diagnosis, the diagnosis no scan loop."""
    wrong = []
    for module, deps in import_graph().items():
        level = _floor(module)
        if level is None:
            continue
        wrong += [f"{module} -> {d}" for d in deps if (_floor(d) or 0) > level]
    assert wrong == []


def test_floor_check_sees_an_upward_import() -> None:
    assert _floor("forensics.analysis.stats.trailing") < _floor("forensics.analysis.trackers.rewards")
    assert _floor("forensics.analysis.trackers.windows") < _floor("forensics.analysis.diagnosis.health")


def test_statistics_import_nothing_from_trackers_or_diagnosis() -> None:
    graph = import_graph(type_only=True)
    wrong = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("forensics.analysis.stats")
             for d in deps if d.startswith(("forensics.analysis.trackers", "forensics.analysis.diagnosis"))]
    assert wrong == []


# -- run discovery lives in io ---------------------------------------------------------------------
def test_scan_watch_fleet_and_the_cli_locate_runs_with_io() -> None:
    graph = import_graph()
    for module in ("forensics.analysis.engine", "forensics.live.watch", "forensics.fleet.discover", "forensics.cli"):
        assert "forensics.io.locate" in graph[module], module


#: What searches a folder for a run's logs: only io may use it.
FOLDER_DETECTORS = {"FORMATS", "detect", "find_run", "wandb_offline", "tensorboard", "trainer_state_of",
                    "CALLBACK_DIR"}


def _code_strings(tree: ast.AST) -> set[str]:
    """The string constants of a module, docstrings left out."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_no_module_outside_io_searches_a_folder_for_a_run() -> None:
    """Which file of a folder is the run's log (a trainer's output_dir, a W&B run, the callback's
    folder) is decided in forensics/io/locate.py only: no other module imports the folder
    detectors or names ``trainer_state.json``."""
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "io":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and "io" in (node.module or "").split("."):
                named = {a.name for a in node.names} & FOLDER_DETECTORS
                if named:
                    wrong.append(f"{path.name}: imports {sorted(named)}")
        if "trainer_state.json" in _code_strings(tree):
            wrong.append(f"{path.name}: names trainer_state.json")
    assert wrong == []


# -- docs/architecture.md is true to the code ------------------------------------------------------
ROOT = PACKAGE.parent
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
_REPO_DIRS = ("forensics/", "tests/", "docs/", "fixtures/", "scripts/", "bench/", "examples/")


def _ticked() -> list[str]:
    return re.findall(r"`([^`\s]+)`", ARCHITECTURE)


def test_every_path_named_in_the_architecture_page_exists() -> None:
    paths = [t for t in _ticked() if t.startswith(_REPO_DIRS) and not set(t) & set("<*")]
    assert len(paths) > 20
    assert [p for p in paths if not (ROOT / p).exists()] == []
    files = {p.name for p in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]}
    bare = [t for t in _ticked() if re.fullmatch(r"[a-z_]+\.py", t)]
    assert [b for b in bare if b not in files] == []


def _resolves(name: str) -> bool:
    """Whether the dotted ``name`` is a module, or an attribute of one, of this package."""
    import importlib

    obj = importlib.import_module("forensics")
    parts = name.split(".")
    for i, attr in enumerate(parts[1:], start=2):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            return False
    return True


def test_every_module_named_in_the_architecture_page_exists() -> None:
    names = set(re.findall(r"\bforensics(?:\.[A-Za-z_]\w*)+", ARCHITECTURE))
    assert len(names) > 15
    assert [n for n in sorted(names) if not _resolves(n)] == []
    assert not _resolves("forensics.analysis.engine.NoSuchThing")


def test_every_table_the_architecture_page_sends_a_contributor_to_is_there() -> None:
    """Each table or function the page names beside a file ("`ALIASES` of `forensics/schema.py`",
    "`locate` in `forensics/io/locate.py`") is defined in that file."""
    found = re.findall(r"`(\w+)`(?:\s+or\s+`(\w+)`)?\s+(?:of|in)\s+`((?:forensics|tests)/[\w/]+\.py)`",
                       ARCHITECTURE)
    pairs = [(name, file) for a, b, file in found for name in (a, b) if name]
    assert len(pairs) >= 10
    missing = [(name, file) for name, file in pairs
               if not re.search(rf"^\s*(?:def |class )?{name}\b", (ROOT / file).read_text(), re.M)]
    assert missing == []


# -- the tracker contract -------------------------------------------------------------------------
MAX_FUNCTION_LINES = 60


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function under ``root`` longer than ``limit`` lines,
    counted from its ``def`` line to the last line of its body (decorators left out)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_the_length_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"@decorator\ndef f():\n{body}\n\ndef g():\n    return 1\n")
    assert [s.split(" ", 1)[1] for s in long_functions(tmp_path)] == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions(tmp_path, MAX_FUNCTION_LINES + 1) == []


def test_no_function_in_analysis_is_over_60_lines() -> None:
    """``update``, ``conclude`` and the rest stay short enough to read: a long one is split into
    named steps (one per rule or per check)."""
    assert long_functions(PACKAGE / "analysis") == []


def test_no_tracker_has_a_begin_step() -> None:
    """One contract for all: each ``update`` decides whether a batch is its business (the base
    offers ``logs_start``), none goes through a ``begin`` of the base."""
    from forensics.analysis.trackers import TRACKERS
    from forensics.analysis.trackers.custom import CustomRules

    for cls in (*TRACKERS.values(), CustomRules):
        assert not hasattr(cls, "begin"), cls.__name__
