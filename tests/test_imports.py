"""No import cycles inside ``planner`` (issue 14, item 5).

Data flows one way: spec/options -> workload + config arrays -> kernel ->
metrics -> storage -> plots/CLI. Every import counts, including imports inside
functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).parents[1] / "planner"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the planner modules it imports. ``from planner.x import y``
    counts planner.x.y when that is a module, else planner.x (so that
    ``from planner import config`` imports planner.config, not the package's
    ``__init__``, which only imports its submodules lazily)."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                deps.update(s for s in subs if s in modules)
                if any(s not in modules for s in subs):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
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
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "planner.api" in import_graph()["planner.cli"] | import_graph()["planner.sweep.chunk"]
