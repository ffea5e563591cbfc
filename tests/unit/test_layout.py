"""The package's structure, checked: no import cycle, commands on top, and
fipstop.probes / fipstop.views visible without the editable-install hook.

The import graph is read with ``ast`` from every module of fipstop (probes/
and views/ through their symlinks), counting every import wherever it
stands - inside functions and under ``if TYPE_CHECKING`` too - except in an
``if __name__ == "__main__":`` block, which runs only when the module is the
program.  A cycle, even one held apart by a function-local import, fails the
test with the modules on it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fipstop"
COMMANDS = "fipstop.commands"
#: the modules allowed to import command modules: the console script's parser
COMMAND_IMPORTERS = {"fipstop.cli"}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d, dirs, files in os.walk(PACKAGE, followlinks=True):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        rel = Path(d).relative_to(PACKAGE.parent)
        for f in files:
            if f.endswith(".py"):
                parts = [*rel.parts, f[:-3]]
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = Path(d) / f
    return out


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The fipstop modules ``name`` imports (a package's submodules where named)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    body = [n for n in tree.body if not _is_main_guard(n)]
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in (n for top in body for n in ast.walk(top)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_every_package() -> None:
    graph = _graph()
    for name in ("fipstop.probes.ring", "fipstop.views.app", "fipstop.model.snapshot", "fipstop.commands.top"):
        assert name in graph
    assert "fipstop.model.snapshot" in graph["fipstop.sources.live"]
    assert "fipstop.commands.top" in graph["fipstop.cli"]


def test_no_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_command_module() -> None:
    graph = _graph()
    commands = {m for m in graph if m.startswith(COMMANDS + ".")}
    shared = {f"{COMMANDS}.options"}  # the options the commands share: not a command
    bad = sorted(f"{m} imports {c}" for m, deps in graph.items() for c in deps & (commands - shared)
                 if m not in COMMAND_IMPORTERS)
    assert not bad, "; ".join(bad)
    library = {m for m in graph if not m.startswith(COMMANDS) and m not in COMMAND_IMPORTERS}
    assert not sorted(m for m in library if f"{COMMANDS}.options" in graph[m])


#: the modules that may turn raw frames into snapshots: the model itself, the
#: sources (each owns one ModelStep), and the UI bench, which times the step
DERIVERS = ("fipstop.model", "fipstop.sources", "fipstop.recording.replay", "fipstop.bench.ui")


def _derive_imports(path: Path) -> list[str]:
    """What a module imports from fipstop.model that derives: derive*, ModelStep."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [f"{n.module}.{a.name}" for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fipstop.model")
            for a in n.names if a.name.startswith("derive") or a.name == "ModelStep"]


def test_only_the_model_and_the_sources_derive() -> None:
    """Views, analysis (check, diagnose), outputs (serve, OpenMetrics), export and
    the commands read the derived Snapshot their source hands them: none derives."""
    bad = sorted(f"{name}: {imp}" for name, path in _modules().items()
                 if not name.startswith(DERIVERS) for imp in _derive_imports(path))
    assert not bad, "; ".join(bad)
    assert _derive_imports(PACKAGE / "sources" / "live.py") == ["fipstop.model.snapshot.ModelStep"]


def test_probes_and_views_import_with_plain_pythonpath(tmp_path: Path) -> None:
    """No editable-install hook: only PYTHONPATH=<the repo> (run from elsewhere)."""
    code = ("import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            "import fipstop.probes.ring, fipstop.views.app, fipstop.model.snapshot\n"
            "assert fipstop.views.app.__file__.startswith(sys.argv[1]), fipstop.views.app.__file__\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr


def test_top_level_probes_and_views_are_links_into_the_package() -> None:
    for name in ("probes", "views"):
        link = PACKAGE / name
        assert link.is_symlink() and link.resolve() == (REPO / name).resolve()


def test_every_bench_c_source_ships_in_the_package() -> None:
    """The benches find their C helpers through the package (fipstop/bench/csrc/*
    -> bench/*/, packaged as fipstop.bench data), so an installed fipstop has them."""
    named = set()
    for path in (PACKAGE / "bench").rglob("*.py"):
        named.update(ast.literal_eval(m.args[0]) for m in ast.walk(ast.parse(path.read_text()))
                     if isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id == "source"
                     and m.args and isinstance(m.args[0], ast.Constant))
    assert named, "no bench names a C source"
    # the globs of pyproject's package data for fipstop.bench: C, C++ (the ring bench's peers) and headers
    on_disk = {str(p.relative_to(REPO / "bench")) for ext in ("c", "cc", "h") for p in (REPO / "bench").glob(f"*/*.{ext}")}
    assert named <= on_disk
    for rel in named:
        assert (PACKAGE / "bench" / "csrc" / rel).is_file(), rel
