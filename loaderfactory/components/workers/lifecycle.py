"""Closing components that own threads or processes, whatever their type."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader


def close_component(component: Any) -> None:
    """Release what ``component`` holds: call its ``close()``, or shut down a DataLoader's workers."""
    close = getattr(component, "close", None)
    if callable(close):
        close()
    if isinstance(component, DataLoader):
        iterator = getattr(component, "_iterator", None)
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        component._iterator = None
