"""A package's public names, imported on first use: the ``__getattr__`` and ``__dir__`` that do it.

``loaderfactory`` and ``loaderfactory.lightning`` use it, so that importing either loads none of what
their names need (torch, pydantic, Lightning) until a name is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``globals()`` are ``namespace``.

    ``exports`` maps each public name to the module that defines it; a name is imported on its first
    look-up and then kept in ``namespace``, so later look-ups skip ``__getattr__``.
    """

    def look_up(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted([*namespace, *exports])

    return look_up, listing
