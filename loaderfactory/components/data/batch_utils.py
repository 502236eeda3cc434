"""Small functions over batches of nested dicts, lists, tuples, tensors and arrays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def clone_batch(batch: Any) -> Any:
    """A copy that shares no tensor or array storage with ``batch`` (for safe echoes)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, Mapping):
        return type(batch)({k: clone_batch(v) for k, v in batch.items()})  # type: ignore[call-arg]  # dict-like types take an items mapping
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(clone_batch(v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(clone_batch(v) for v in batch)
    return batch


_ARRAYS = (torch.Tensor, np.ndarray)
"""A tuple, not a union: ``isinstance`` checks it faster, and a ``Loader`` asks once per batch."""


def batch_length(batch: Any) -> int:
    """Items in a batch: the first dimension of its first tensor or array, else its length, else 1."""
    if isinstance(batch, _ARRAYS):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, Mapping):
        for value in batch.values():
            return batch_length(value)
        return 0
    if isinstance(batch, list | tuple):
        for value in batch:
            if type(value) in _LEAVES:
                continue  # a batch's keys or paths: a quick look past each
            if isinstance(value, torch.Tensor | np.ndarray | Mapping):
                return batch_length(value)
        return len(batch)
    return 1


_LEAVES = frozenset((str, bytes, int, float, bool, type(None)))
"""Types that hold no items of their own (exact types: a subclass takes the full check)."""


def batch_nbytes(batch: Any) -> int:
    """Bytes held by the tensors and arrays in ``batch`` (other objects count as 0)."""
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, Mapping):
        return sum(batch_nbytes(v) for v in batch.values())
    if isinstance(batch, list | tuple):
        return sum(batch_nbytes(v) for v in batch)
    return 0
