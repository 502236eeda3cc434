"""Build the datasets' helpers from their specs: transforms and collate functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaderfactory.builders.targets import instantiate_target
from loaderfactory.components.data.transforms import Compose
from loaderfactory.config import registry
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.target import TargetSpec


def build_helper(
    table: registry.Table, spec: Spec | None, path: str | None = None
) -> Callable[..., Any] | None:
    """The transform or collate function ``spec`` describes (``None`` for no spec).

    A ``_target_`` node is built by ``hydra.utils.instantiate``; its errors are reported at ``path``
    (by default the table's name, which the slot's builder prefixes).
    """
    if spec is None:
        return None
    if isinstance(spec, TargetSpec):
        return instantiate_target(spec, path or table)  # type: ignore[no-any-return]  # the user's callable
    kind = getattr(spec, "kind", None)
    entry = registry.lookup(table, kind) if kind is not None else _by_type(table, spec)
    return entry.builder(spec)  # type: ignore[no-any-return]  # builders return callables


def _by_type(table: registry.Table, spec: Spec) -> registry.Entry:
    for kind in registry.available(table):
        entry = registry.lookup(table, kind)
        if type(spec) is entry.spec:
            return entry
    raise LookupError(f"no {table} kind is registered with spec {type(spec).__name__}")


def build_transforms(refs: Any, path: str) -> Callable[..., Any] | None:
    """One transform from a spec, or a :class:`Compose` from a list of them; errors name ``path``."""
    if refs is None:
        return None
    if isinstance(refs, list):
        built = (build_helper("transform", ref, f"{path}.{i}") for i, ref in enumerate(refs))
        return Compose([t for t in built if t is not None])
    return build_helper("transform", refs, path)
