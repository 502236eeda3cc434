"""``ThreadDataLoader``: a ``torch.utils.data.DataLoader`` whose batches a ``ThreadBuffer`` prefetches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from torch.utils.data import DataLoader, Dataset

from loaderfactory.components.thread.buffer import ThreadBuffer

T = TypeVar("T")


class _Reiterable(Generic[T]):
    def __init__(self, make: Callable[[], Iterator[T]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[T]:
        return self._make()


class ThreadDataLoader(DataLoader[Any]):
    """A ``torch.utils.data.DataLoader`` whose batches are prefetched by a :class:`ThreadBuffer`.

    Use it where code expects a real ``DataLoader``. With ``num_workers=0`` and a dataset that
    releases the GIL (I/O, numpy, torch ops), loading overlaps the training step at the cost of
    one thread instead of worker processes.

    Args:
        dataset: the dataset to load from.
        buffer_size: batches fetched ahead by the thread.
        buffer_timeout: stall deadline in seconds for the next batch (``None`` waits forever).
        num_workers: ``DataLoader`` worker processes beneath the thread.
        repeats: yield each batch this many times (data echoing); ``len()`` counts them.
        copy_echoes: see :class:`ThreadBuffer`.
        **kwargs: any other ``DataLoader`` argument (``batch_size``, ``shuffle``, ...).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        buffer_size: int = 1,
        buffer_timeout: float | None = None,
        num_workers: int = 0,
        repeats: int = 1,
        copy_echoes: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, num_workers=num_workers, **kwargs)
        self.buffer = ThreadBuffer(
            _Reiterable(self._batches),
            buffer_size=buffer_size,
            timeout=buffer_timeout,
            repeats=repeats,
            copy_echoes=copy_echoes,
            name="ThreadDataLoader",
        )
        self.buffer_size = buffer_size
        self.buffer_timeout = buffer_timeout
        self.repeats = repeats

    def _batches(self) -> Iterator[Any]:
        return super().__iter__()

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches, as DataLoader does
        return iter(self.buffer)

    def __len__(self) -> int:
        return super().__len__() * self.repeats

    def close(self) -> None:
        """Stop the prefetch thread (and with it the pass over the ``DataLoader``)."""
        self.buffer.close()

    def __enter__(self) -> ThreadDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
