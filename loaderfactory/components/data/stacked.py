"""Items read straight into batch tensors, and the collate that keeps those tensors instead of
stacking the rows again.

A dataset whose ``__getitems__`` can read a field of every item of a batch into one tensor (the
shards kind does this for fixed-size ``.npy`` fields) returns :class:`StackedItems`: each item's
field (a dict item's key, a tuple or list item's position) is a row of that tensor.
:func:`default_collate` gives what torch's ``default_collate`` gives, and for such a field it hands
over the tensor itself: one copy of the data fewer, and in a worker process the tensor is already
in shared memory.

It does so only while the list is as read: each item still holds its row (a transform that
replaced it makes the field stacked again), and only once (collating the same list twice stacks the
second time), so a batch shares memory with nothing but the items it came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate as torch_default_collate
from torch.utils.data import get_worker_info

from loaderfactory.components.data.collate import collate_same_fields
from loaderfactory.components.workers.batch_transfer import BY_VALUE_BYTES

Field = str | int
"""A dict item's key, or a tuple or list item's position."""


class StackedItems(list[Any]):
    """Dict, tuple or list items where, for each field of ``stacked``, ``item[field]`` is row ``i``
    of ``stacked[field]``."""

    def __init__(self, items: Sequence[Any], stacked: Mapping[Field, torch.Tensor]) -> None:
        super().__init__(items)
        self.stacked = dict(stacked)
        self.rows = {field: [item[field] for item in items] for field in stacked}

    def take(self, field: Field) -> torch.Tensor | None:
        """``stacked[field]`` when every item still holds its row of it, once; None otherwise."""
        tensor = self.stacked.pop(field, None)
        rows = self.rows.pop(field, None)
        if tensor is None or rows is None or len(rows) != len(self):
            return None
        for item, row in zip(self, rows, strict=True):
            if _field(item, field) is not row:
                return None
        return tensor


def _field(item: Any, field: Field) -> Any:
    """``item[field]`` of a plain dict, tuple or list item; None when it has none."""
    kind = type(item)
    if kind is dict:
        return item.get(field)
    if (kind is tuple or kind is list) and type(field) is int and 0 <= field < len(item):
        return item[field]
    return None


def default_collate(items: Any) -> Any:
    """torch's ``default_collate``; the fields of :class:`StackedItems` read into one tensor are
    that tensor, not a copy of it (see the module). Dict items lacking a field another has are
    refused, naming the item (:func:`.collate.collate_same_fields`)."""
    return collate_same_fields(_collate, items)


def _collate(items: Any) -> Any:
    kind = type(items[0]) if isinstance(items, StackedItems) and items else None
    if kind is dict:
        return {key: collate_field(items, key) for key in items[0]}
    if (kind is tuple or kind is list) and len({len(item) for item in items}) == 1:
        # torch gives a list for a batch of tuples or of lists (its "backwards compatibility")
        return [_collate_position(items, position) for position in range(len(items[0]))]
    return torch_default_collate(items)


def _collate_position(items: StackedItems, position: int) -> Any:
    """What torch's collate makes of the values at ``position`` (given as a tuple, as torch
    transposes them: strings stay a tuple); the tensor itself where the items hold its rows."""
    tensor = items.take(position)
    if tensor is not None:
        return tensor
    values = tuple(item[position] for item in items)
    return torch_default_collate(values)  # type: ignore[arg-type]  # torch collates its own transposed tuples


def collate_field(items: Sequence[Any], key: Field) -> Any:
    """``default_collate([item[key] for item in items])``; the tensor itself where ``items`` are
    :class:`StackedItems` holding their rows of it."""
    tensor = items.take(key) if isinstance(items, StackedItems) else None
    return tensor if tensor is not None else torch_default_collate([item[key] for item in items])


def batch_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor for a batch read in place: in a worker process, in shared memory when
    torch would send it that way (larger than ``BY_VALUE_BYTES``), as ``default_collate`` does."""
    nbytes = math.prod(shape) * dtype.itemsize
    if get_worker_info() is None or nbytes <= BY_VALUE_BYTES:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]  # as torch collates
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)
