"""One loaded item in a :class:`~loaderfactory.components.queue.store.QueueStore`: what the filler
puts in, the draws pick and the telemetry counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Entry:
    """One loaded item and what the queue knows about it."""

    item: Any
    index: int
    nbytes: int
    born: float
    """``time.monotonic()`` when it entered the queue."""
    held: bool = False
    """Whether it is in the queue now (set by :class:`~loaderfactory.components.queue.draws.LeastDrawn`)."""
