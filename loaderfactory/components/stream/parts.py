"""The pieces :class:`~loaderfactory.components.stream.wrapper.StreamWrapper` is made of.

``events`` turns a stream factory into one sequence of batches and pass ends, the same whether it
is pulled by the consumer or by a :class:`~loaderfactory.components.thread.buffer.ThreadBuffer`'s
thread (so buffered and unbuffered runs agree); ``Timeline`` records when the producer worked and
when the consumer waited.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

StreamEvent = tuple[str, Any, Any]
"""``("batch", batch, upstream_snapshot)`` or ``("end", None, upstream_snapshot)`` at each end of the
stream (the snapshot is ``None`` when no upstream is tracked)."""

BATCH = "batch"
END = "end"

_KEEP = 100_000
"""Intervals the timeline keeps (the most recent ones)."""


class EmptyStreamError(ValueError):
    """A stream with a fixed epoch size yielded nothing twice in a row: no epoch could ever fill."""


def events(
    stream_fn: Callable[[], Iterable[Any]],
    epoch_size: int,
    name: str,
    snapshot: Callable[[], Any] | None,
    skip: int,
    timeline: Timeline,
) -> Generator[StreamEvent, None, None]:
    """Batches of ``stream_fn()``, an ``end`` at each end of it; restarts it when ``epoch_size > 0``.

    ``skip`` batches are pulled and dropped first (a restored stream replaying its pass). A pass
    may be empty once (a restored stream resuming right at its end); two empty passes in a row
    mean the stream is empty and raise :class:`EmptyStreamError` instead of spinning.
    """
    empty_passes = 0
    while True:
        stream = iter(stream_fn())
        pulled = False
        try:
            while True:
                started = time.perf_counter()
                try:
                    batch = next(stream)
                except StopIteration:
                    break
                timeline.produced(started, time.perf_counter())
                pulled = True
                if skip:
                    skip -= 1
                    continue
                yield BATCH, batch, snapshot() if snapshot is not None else None
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()
            del stream
        if epoch_size > 0:
            empty_passes = 0 if pulled else empty_passes + 1
            if empty_passes >= 2:
                raise EmptyStreamError(
                    f"stream {name!r} is empty: it ended twice in a row without a batch, so an epoch "
                    f"of epoch_size={epoch_size} batches can never be filled; check the slots before it"
                )
        yield END, None, snapshot() if snapshot is not None else None
        if epoch_size <= 0:
            return


class Timeline:
    """When the producer pulled each batch and how long the consumer waited for each one."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.producer: deque[tuple[float, float]] = deque(maxlen=_KEEP)
        self.consumer: deque[tuple[float, float]] = deque(maxlen=_KEEP)
        self.batches = 0
        self.wait_total = 0.0
        self.busy_total = 0.0

    def produced(self, started: float, ended: float) -> None:
        self.producer.append((started, ended))
        self.busy_total += ended - started

    def consumed(self, started: float, ended: float) -> None:
        self.consumer.append((started, ended))
        self.batches += 1
        self.wait_total += ended - started

    def waits(self) -> list[float]:
        """The consumer's wait per batch (the most recent ones), in seconds."""
        return [end - start for start, end in list(self.consumer)]

    def summary(self) -> dict[str, Any]:
        waits = np.asarray(self.waits() or [0.0])
        return {
            "batches": self.batches,
            "wait_total_s": round(self.wait_total, 4),
            "wait_mean_ms": round(float(waits.mean()) * 1e3, 3),
            "wait_p50_ms": round(float(np.percentile(waits, 50)) * 1e3, 3),
            "wait_p99_ms": round(float(np.percentile(waits, 99)) * 1e3, 3),
            "producer_busy_s": round(self.busy_total, 4),
        }
