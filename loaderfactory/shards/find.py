"""Find the shards dataset a built pipeline reads, for the run report and ``run.mode=plan``."""

from __future__ import annotations

from typing import Any

from loaderfactory.shards.dataset import ShardsDataset

_WRAPPED_IN = ("dataset", "source")
"""Attributes through which components (a queue, a ``sharded`` loader, a torch DataLoader, a
dataset wrapper) hold what they read."""


def find_shards(components: Any, depth: int = 4) -> ShardsDataset | None:
    """The :class:`ShardsDataset` among ``components`` (a loader's components, or one of them),
    looking through the objects they wrap, ``depth`` levels at most; None when there is none."""
    pending = list(components) if isinstance(components, (list, tuple)) else [components]
    for _ in range(depth + 1):
        wrapped = []
        for component in pending:
            if isinstance(component, ShardsDataset):
                return component
            wrapped += [getattr(component, name, None) for name in _WRAPPED_IN]
        pending = [inner for inner in wrapped if inner is not None]
    return None
