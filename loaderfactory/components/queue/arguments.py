"""The cheap checks of :class:`~loaderfactory.components.queue.dataset.QueueDataset`'s arguments,
and what they come to: sizes in bytes and items, transforms that all take a generator.

Each raises ``ValueError`` (``TypeError`` for a value of the wrong kind) naming the argument to
change; a budget the machine cannot give is a :class:`LimitError` that names it.
Configs get the same rules, with every problem at once, from
:class:`~loaderfactory.config.specs.queue.QueueDatasetSpec`, which also reads size strings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import IterableDataset

from loaderfactory.components.data.batch_utils import batch_nbytes
from loaderfactory.components.data.transforms import takes_generator
from loaderfactory.components.queue.store import megabytes
from loaderfactory.errors import LimitError

MB = 10**6
CHOICES = {
    "mode": ("onsample", "always"),
    "worker_type": ("thread", "process"),
    "on_fill_timeout": ("raise", "warn"),
}


def dataset_length(dataset: Any) -> int:
    """``len(dataset)`` of a map-style dataset with at least one item."""
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
        raise TypeError(
            "the queue loads items by index and needs a map-style dataset (len and [i]), "
            f"got {type(dataset).__name__}"
        )
    if len(dataset) < 1:
        raise ValueError("dataset is empty; QueueDataset needs at least one item to load")
    return len(dataset)


def check_arguments(
    counts: dict[str, Any], choices: dict[str, Any], capacity: int | None, wait_fill: bool | int
) -> None:
    """Each of ``counts`` an int >= 1, each of ``choices`` one of :data:`CHOICES`, ``capacity`` such
    an int or ``None`` and ``wait_fill`` a bool or such an int."""
    if capacity is not None:
        counts = {**counts, "capacity": capacity}
    if wait_fill is not True and wait_fill is not False:
        counts = {**counts, "wait_fill": wait_fill}
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    for name, value in choices.items():
        if value not in CHOICES[name]:
            raise ValueError(f"{name} must be one of {', '.join(CHOICES[name])}, got {value!r}")


def budget_bytes(ram_budget: float | int, available: int) -> int:
    """Bytes from a float in (0, 1] (a fraction of ``available``) or an int (bytes)."""
    if isinstance(ram_budget, bool) or not isinstance(ram_budget, int | float):
        raise TypeError(
            f"ram_budget must be a fraction in (0, 1] or bytes, got {ram_budget!r}; a size string "
            "like '2GiB' is read by the config (QueueDatasetSpec): here write 2 * 2**30"
        )
    if isinstance(ram_budget, float):
        if not 0 < ram_budget <= 1:
            raise ValueError(
                f"ram_budget as a float is a fraction of available memory in (0, 1], got {ram_budget}; "
                "give bytes as an int"
            )
        return int(ram_budget * available)
    if ram_budget < 1:
        raise ValueError(f"ram_budget as an int is bytes and must be >= 1, got {ram_budget}")
    return ram_budget


def item_bytes(avg_item_size: float | torch.Tensor | Mapping[str, Any] | None) -> int | None:
    """Bytes of one item from a size in MB or an example item (tensor, dict, list); ``None`` stays."""
    if avg_item_size is None:
        return None
    if isinstance(avg_item_size, torch.Tensor | Mapping | list | tuple | np.ndarray):
        size = batch_nbytes(avg_item_size)
        if size <= 0:
            raise ValueError("avg_item_size: the example item holds no tensors to measure")
        return size
    if (
        isinstance(avg_item_size, bool)
        or not isinstance(avg_item_size, int | float)
        or not 0 < avg_item_size < float("inf")
    ):
        raise ValueError(
            f"avg_item_size must be a finite size in MB > 0 or an example item, got {avg_item_size!r}"
        )
    return max(1, int(avg_item_size * MB))


def sizes(
    ram_budget: float | int,
    avg_item_size: float | torch.Tensor | Mapping[str, Any] | None,
    capacity: int | None,
    length: int,
    component: object,
) -> tuple[int, int | None, int]:
    """``(budget, item_size, capacity)`` in bytes, bytes (``None``: measured as items load) and items.

    The capacity is at most ``length`` (more slots would only hold duplicates) and, without one
    given, what the budget holds of items of ``avg_item_size``.
    """
    available = int(psutil.virtual_memory().available)
    budget = budget_bytes(ram_budget, available)
    if budget > available:
        raise LimitError(
            "ram_budget",
            f"{megabytes(budget)} is more than the {megabytes(available)} of memory available; "
            "give a smaller size or a fraction such as 0.5",
            component=component,
        )
    item_size = item_bytes(avg_item_size)
    if item_size is not None and item_size > budget:
        raise LimitError(
            "ram_budget",
            f"{megabytes(budget)} holds not even one item of {megabytes(item_size)} "
            "(avg_item_size); raise ram_budget",
            component=component,
        )
    if capacity is None and item_size:
        capacity = max(1, budget // item_size)
    return budget, item_size, min(capacity, length) if capacity is not None else length


def as_transform(fn: Callable[..., Any] | None) -> Callable[[Any, torch.Generator], Any] | None:
    """``fn`` as ``f(item, generator)``, deciding once whether it takes the generator."""
    if fn is None or takes_generator(fn):
        return fn
    return lambda item, generator: fn(item)
