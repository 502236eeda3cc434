"""The modules of ``loaderfactory.shards`` import each other without a cycle, counting imports under
``TYPE_CHECKING`` and inside functions: each can be read (and changed) knowing only what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import loaderfactory

PACKAGE = Path(loaderfactory.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("loaderfactory", *path.relative_to(PACKAGE).with_suffix("").parts))
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports anywhere in it (``from pkg import module`` counts as
    importing ``module``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                out.add(name if name in known else node.module)
    return {name for name in out if name in known}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path of imports from ``start`` back to it, if any (depth first)."""
    stack, seen = [(start, [start])], set()
    while stack:
        module, path = stack.pop()
        for target in sorted(graph.get(module, ())):
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_the_shards_modules_import_each_other_without_a_cycle() -> None:
    known = _modules()
    shards = {name for name in known if name.startswith("loaderfactory.shards.")}
    graph = {name: _imports(known[name], known) & shards for name in shards}
    cycles = [cycle for name in sorted(shards) if (cycle := _cycle_from(name, graph))]
    assert not cycles, " ; ".join(" -> ".join(cycle) for cycle in cycles)


def test_the_check_sees_a_cycle_under_type_checking(tmp_path: Path) -> None:
    """The check above can fail: a ``TYPE_CHECKING`` import back is an edge like any other."""
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from second import X\n")
    second.write_text("import first\n")
    known = {"first": first, "second": second}
    graph = {name: _imports(path, known) for name, path in known.items()}
    assert _cycle_from("first", graph) == ["first", "second", "first"]


ROOMS_BELOW = {
    "storage": set(),
    "formats": {"storage"},
    "index": {"storage", "formats"},
    "read": {"storage", "formats", "index"},
    "write": {"storage", "formats", "index"},
}
"""What each room of ``loaderfactory/shards/`` may import besides itself; every room may also import
the leaf modules beside ``dataset.py`` (:data:`SHARED`)."""
SHARED = {"errors", "stats", "order"}


def _room(module: str) -> str:
    return module.split(".")[2]


def test_each_room_of_shards_imports_only_the_rooms_below_it() -> None:
    known = _modules()
    shards = {name for name in known if name.startswith("loaderfactory.shards.")}
    assert {_room(name) for name in shards if len(name.split(".")) > 3} == set(ROOMS_BELOW)
    wrong = [
        f"{name} -> {target}"
        for name in sorted(shards)
        if _room(name) in ROOMS_BELOW
        for target in sorted(_imports(known[name], known) & shards)
        if _room(target) not in {_room(name)} | ROOMS_BELOW[_room(name)] | SHARED
    ]
    assert not wrong, "; ".join(wrong)
