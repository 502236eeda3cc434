"""``ThreadDataLoader``: a ``torch.utils.data.DataLoader`` whose batches a ``ThreadBuffer`` prefetches."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from torch.utils.data import DataLoader, Dataset

from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.workers.lifecycle import grace, stopping_together
from loaderfactory.components.workers.watched import start_pass, stop_loader_workers

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
    one thread instead of worker processes. With worker processes, a worker's exception, an early
    ``break`` and ``close()`` stop them (an exception before it reaches the loop), so none outlives
    the pass while the caller still holds the exception.

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
        self._workers_lock = threading.Lock()
        self._live: weakref.ref[Any] | None = None  # the running pass (torch's iterator, watched)
        self._stops = 0  # passes stopped so far: a pass stopped before it started starts nothing
        self.buffer = ThreadBuffer(
            _Reiterable(self._batches),
            buffer_size=buffer_size,
            timeout=buffer_timeout,
            repeats=repeats,
            copy_echoes=copy_echoes,
            name="ThreadDataLoader",
            unblock=self._unblock,
        )
        self.buffer_size = buffer_size
        self.buffer_timeout = buffer_timeout
        self.repeats = repeats

    def _batches(self) -> Iterator[Any]:
        """The batches of a pass: made with the buffer's pass, read on its thread."""
        return self._read(self._stops)

    def _read(self, stops: int) -> Iterator[Any]:
        with self._workers_lock:
            if self._stops != stops:  # the pass was stopped before its thread began: start nothing
                return
            batches = start_pass(self, super().__iter__, "ThreadDataLoader")
        try:
            yield from batches  # ends early when close() ends its wait for a batch
        except GeneratorExit:
            if not self.persistent_workers:  # the pass was stopped: its workers go with it, at once
                self._stop_workers(0.0)
            raise
        except BaseException:
            # A worker's exception: stop the workers at once, then let it go to the consumer.
            self._stop_workers(0.0)
            raise

    def _unblock(self) -> None:
        """Release a producer thread waiting inside torch's iterator (a pass being stopped).

        The pass's workers stop; persistent ones stay for the next pass, and only the wait ends. A
        producer that has not started its workers yet starts none.
        """
        with self._workers_lock:
            self._stops += 1
        self._stop_workers(keep_persistent=True)

    def _stop_workers(self, grace_s: float | None = None, keep_persistent: bool = False) -> None:
        """Stop the worker processes of the running pass (and persistent ones) within ``grace_s``."""
        with self._workers_lock:
            stop_loader_workers(self, grace() if grace_s is None else grace_s, keep_persistent)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches, as DataLoader does
        return iter(self.buffer)

    def __len__(self) -> int:
        return super().__len__() * self.repeats

    def close(self) -> None:
        """Stop the prefetch thread and the worker processes, within a bounded grace."""
        with stopping_together():
            self.buffer.close()
            self._stop_workers()

    def __enter__(self) -> ThreadDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, nothing is waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()
