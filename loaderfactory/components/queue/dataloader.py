"""A ``DataLoader`` over a queue's batches: torchvtk's ``get_dataloader``, minus what would batch twice."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, IterableDataset

BATCHING = ("batch_size", "collate_fn", "shuffle", "sampler", "batch_sampler", "drop_last")
"""``DataLoader`` arguments that would batch or order again what the queue hands out batched."""


def queue_dataloader(queue: IterableDataset[Any], **kwargs: Any) -> DataLoader[Any]:
    """``DataLoader(queue, batch_size=None, **kwargs)``: each batch of ``queue`` passed on as it is.

    Raises:
        TypeError: ``kwargs`` holds one of :data:`BATCHING`.
        ValueError: ``num_workers > 0``: each worker would hold a copy of the whole queue.
    """
    fixed = sorted(name for name in BATCHING if name in kwargs)
    if fixed:
        raise TypeError(f"get_dataloader: {fixed} are set by the queue itself (batch_size, collate)")
    if kwargs.get("num_workers", 0):
        raise ValueError("get_dataloader: num_workers must be 0; the queue loads with its own workers")
    return DataLoader(queue, batch_size=None, **kwargs)
