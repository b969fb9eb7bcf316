"""The package's import graph, read with ``ast`` (nothing is imported).

* No runtime import cycle inside ``zmesh``, even through a function-level import.
  Imports under ``if TYPE_CHECKING:`` are type-only: a cycle needing one is allowed.
* Every public module (no ``_`` at the start of any part of its dotted name)
  defines ``__all__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = "zmesh"
ROOT = Path(__file__).resolve().parent.parent / PKG

Graph = dict[str, set[str]]


def module_name(path: Path) -> str:
    parts = [PKG, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES: dict[str, Path] = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
PACKAGES = {module_name(p) for p in ROOT.rglob("__init__.py")} | {PKG}


def is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def imports(node: ast.AST, type_only: bool = False) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node``, with whether it is type-only."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(node, type_only)]
    if isinstance(node, ast.If) and is_type_checking(node.test):
        found = [i for stmt in node.body for i in imports(stmt, True)]
        return found + [i for stmt in node.orelse for i in imports(stmt, type_only)]
    return [i for child in ast.iter_child_nodes(node) for i in imports(child, type_only)]


def targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules of this package that one import statement loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in SOURCES}
    if node.level:  # relative: start from the importing module's package
        package = module if module in PACKAGES else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    found: set[str] = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in SOURCES:  # `from .pkg import mod`: the submodule itself
            found.add(submodule)
        elif base in SOURCES:  # `from .mod import name`: an attribute of base
            found.add(base)
    return found


def build_graphs() -> tuple[Graph, Graph]:
    """(runtime edges, edges that exist only under TYPE_CHECKING)."""
    runtime: Graph = {name: set() for name in SOURCES}
    typing_only: Graph = {name: set() for name in SOURCES}
    for name, path in SOURCES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in imports(tree):
            (typing_only if type_only else runtime)[name] |= targets(name, node) - {name}
    for name in SOURCES:
        typing_only[name] -= runtime[name]
    return runtime, typing_only


def simple_cycles(graph: Graph, limit: int = 500) -> list[list[str]]:
    """Every elementary cycle, each listed once from its smallest module."""
    cycles: list[list[str]] = []

    def walk(start: str, path: list[str]) -> None:
        for nxt in sorted(graph[path[-1]]):
            if len(cycles) >= limit:
                return
            if nxt == start:
                cycles.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return cycles


def render(runtime: Graph, typing_only: Graph) -> str:
    lines = ["import graph (module -> sorted imports; [TYPE_CHECKING-only] in brackets):"]
    for name in sorted(runtime):
        extra = f"  [{', '.join(sorted(typing_only[name]))}]" if typing_only[name] else ""
        lines.append(f"  {name} -> {', '.join(sorted(runtime[name])) or '-'}{extra}")
    return "\n".join(lines)


IMPORT_FORMS = [  # (importing module, statement, modules it loads)
    (f"{PKG}.message", f"import {PKG}.errors", {f"{PKG}.errors"}),
    (f"{PKG}.message", "from . import errors, Node", {f"{PKG}.errors", PKG}),
    (f"{PKG}.message", "from .transport import base", {f"{PKG}.transport.base"}),
    (f"{PKG}.transport.inproc", "from .. import errors", {f"{PKG}.errors"}),
    (f"{PKG}.transport.inproc", "from ..errors import ZmeshError", {f"{PKG}.errors"}),
    (PKG, "from .errors import ZmeshError", {f"{PKG}.errors"}),
    (f"{PKG}.message", "import os, zmesh_other", set()),
]


def test_every_import_form_resolves() -> None:
    for module, source, expected in IMPORT_FORMS:
        node = ast.parse(source).body[0]
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        assert targets(module, node) == expected, source
    source = "import a\nif TYPE_CHECKING:\n import b\nelse:\n import c\n"
    source += "def f():\n if typing.TYPE_CHECKING:\n  import d\n import e\n"
    assert [type_only for _, type_only in imports(ast.parse(source))] == [False, True, False, True, False]


def test_no_runtime_import_cycle() -> None:
    runtime, typing_only = build_graphs()
    cycles = "\n".join(f"  {' -> '.join(cycle)}" for cycle in simple_cycles(runtime))
    assert not cycles, (
        f"runtime import cycles in {PKG} (TYPE_CHECKING-only edges are allowed):\n"
        f"{cycles}\n\n{render(runtime, typing_only)}"
    )


def test_every_public_module_defines_all() -> None:
    missing: list[str] = []
    for name, path in SOURCES.items():
        if any(part.startswith("_") for part in name.split(".")):
            continue  # private (or __main__): no public surface to declare
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        assigned = {
            target.id
            for stmt in tree.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            if isinstance(target, ast.Name)
        }
        missing += [] if "__all__" in assigned else [name]
    assert not missing, f"public modules without __all__: {sorted(missing)}"


def folder(module: str) -> str:
    """The package a module sits in (``zmesh`` for the top-level modules)."""
    return module if module in PACKAGES else module.rpartition(".")[0]


#: The one cycle among the top-level modules, type-only: ``Agent.node`` (public)
#: is typed as the Node that hosts it, and a Node makes its Agents. Both are
#: the face; neither reaches below into the other's internals.
FACE_PAIR = {f"{PKG}.agent", f"{PKG}.node"}


def test_no_import_cycle_spans_two_folders_or_the_top_level() -> None:
    """Type-only imports count: a cycle they close couples the modules as much.
    A cycle inside one subpackage (the engine's helpers) is that package's business."""
    runtime, typing_only = build_graphs()
    every = {name: runtime[name] | typing_only[name] for name in SOURCES}
    spanning = [c for c in simple_cycles(every)
                if (len({folder(m) for m in c}) > 1 or folder(c[0]) == PKG) and set(c) != FACE_PAIR]
    cycles = "\n".join(f"  {' -> '.join(cycle)}" for cycle in spanning)
    assert not cycles, f"import cycles across folders or among zmesh's top-level modules:\n{cycles}"
