"""The modules of ``loaderfactory`` import each other without a cycle, counting imports under
``TYPE_CHECKING`` and inside functions: each module can be read (and changed) knowing only what it
imports, and none needs another one half-initialised."""

from __future__ import annotations

import ast
from pathlib import Path

import loaderfactory

PACKAGE = Path(loaderfactory.__file__).parent


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its own name, not ``__init__``)."""
    found = {}
    for path in root.rglob("*.py"):
        name = ".".join((package, *path.relative_to(root).with_suffix("").parts))
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``path`` imports anywhere in it: ``from pkg import name`` imports
    ``pkg.name`` when that is a module, else ``pkg``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                out.add(name if name in known else node.module)
    return out & set(known)


def _graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the other modules it imports."""
    return {name: _imports(path, known) - {name} for name, path in known.items()}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A shortest path of imports from ``start`` back to it, if any (breadth first)."""
    paths, seen = [[start]], {start}
    while paths:
        for path in paths:
            if start in graph[path[-1]]:
                return [*path, start]
        longer = []
        for path in paths:
            for target in sorted(graph[path[-1]] - seen):
                seen.add(target)
                longer.append([*path, target])
        paths = longer
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``, each once (from its first module by name)."""
    found: dict[frozenset[str], list[str]] = {}
    for name in sorted(graph):
        cycle = _cycle_from(name, graph)
        if cycle is not None:
            found.setdefault(frozenset(cycle), cycle)
    return list(found.values())


def test_the_package_modules_import_each_other_without_a_cycle() -> None:
    cycles = _cycles(_graph(_modules(PACKAGE, "loaderfactory")))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_check_sees_a_cycle_under_type_checking_or_in_a_function(tmp_path: Path) -> None:
    """The check above can fail: an import under ``TYPE_CHECKING``, inside a function or of a
    package's module by ``from package import module`` is an edge like any other."""
    (tmp_path / "pkg").mkdir()
    files = {
        "__init__.py": "",
        "first.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.second import X\n",
        "second.py": "def f():\n    from pkg import third\n",
        "third.py": "import pkg.first\n",
        "alone.py": "from pkg import first\n",
    }
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    graph = _graph(_modules(tmp_path / "pkg", "pkg"))
    assert _cycles(graph) == [["pkg.first", "pkg.second", "pkg.third", "pkg.first"]]
