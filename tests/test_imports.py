"""The package's layering: stages that follow the data flow, no cycles.

Data flows one way: workload -> models and hardware -> latency -> scheduler
configuration -> kernel -> api and metrics -> max-rate search -> sweep ->
answers -> plots -> report -> cli (``STAGES``; docs/architecture.md). A module imports
only from its own stage and the stages before it, no two modules import each
other, and only ``planner.cli`` imports Typer or rich. Every import counts,
including imports inside functions and under ``TYPE_CHECKING``.
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
    assert (
        "planner.api"
        in import_graph()["planner.cli.commands"] | import_graph()["planner.sweep.chunk"]
    )


# The stages, in data-flow order; a module belongs to the first prefix it matches
# (a package or a module). ``planner/__init__.py`` (the lazy public facade) is
# outside the stages.
STAGES: tuple[tuple[str, ...], ...] = (
    (
        "planner.text",
        "planner.bounds",
        "planner.install_check",
        "planner.numba_cache",
        "planner.inputs",
    ),
    ("planner.workload",),
    ("planner.models",),
    ("planner.latency",),
    (
        "planner.config",
        "planner.capacity",
        "planner.slo",
        "planner.resolve",
        "planner.inert",
        "planner.workload_checks",
        "planner.speculative",
        "planner.kv_transfer",
    ),
    ("planner.kernel", "planner.reference"),
    ("planner.api", "planner.metrics", "planner.replicas", "planner.disagg"),
    ("planner.maxrate",),
    ("planner.sweep",),
    ("planner.answers",),
    ("planner.plots",),
    ("planner.report",),
    ("planner.cli",),
)


def stage_of(module: str) -> int:
    """The index in ``STAGES`` of ``module``; KeyError for a module in none."""
    for i, prefixes in enumerate(STAGES):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise KeyError(module)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import of a later stage by an earlier one."""
    return sorted(
        f"{a} -> {b}"
        for a, deps in graph.items()
        if a != "planner"
        for b in deps
        if b != "planner" and stage_of(b) > stage_of(a)
    )


def test_every_module_has_a_stage():
    unplaced = []
    for m in import_graph():
        if m == "planner":
            continue
        try:
            stage_of(m)
        except KeyError:
            unplaced.append(m)
    assert unplaced == []


def test_no_module_imports_a_later_stage():
    assert upward_imports(import_graph()) == []


def test_the_layering_check_finds_an_upward_import():
    graph = import_graph()
    graph["planner.kernel.step"] = graph["planner.kernel.step"] | {"planner.sweep.driver"}
    assert upward_imports(graph) == ["planner.kernel.step -> planner.sweep.driver"]


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of every package ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def test_only_the_cli_imports_typer_or_rich():
    outside = sorted(
        str(p.relative_to(PKG.parent))
        for p in PKG.rglob("*.py")
        if "cli" not in p.relative_to(PKG).parts[:1]
        and third_party_imports(p) & {"typer", "rich", "click"}
    )
    assert outside == []


def test_the_kernel_cache_key_skips_only_stages_after_the_kernel():
    """``planner.numba_cache`` leaves packages out of its source hash; each must
    be one jitted code cannot import (a stage after the kernel's)."""
    from planner import numba_cache

    kernel = stage_of("planner.kernel")
    assert all(stage_of(f"planner.{p}") > kernel for p in numba_cache.AFTER_KERNEL)
