"""One start of a :class:`~loaderfactory.components.queue.dataset.QueueDataset`: its store of loaded
items, its balanced draws and the filler that loads into it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

import torch

from loaderfactory.components.queue.draws import LeastDrawn
from loaderfactory.components.queue.filler import Filler
from loaderfactory.components.queue.store import Mode, QueueStore
from loaderfactory.components.queue.telemetry import QueueTelemetry


class QueueSettings(Protocol):
    """What a run reads of the queue it starts (a ``QueueDataset``), which its store names in errors."""

    dataset: Any
    preprocess: Callable[[Any], Any] | None
    seed: int
    budget: int
    capacity: int
    mode: Mode
    num_workers: int
    worker_type: Literal["thread", "process"]
    multiprocessing_context: str | None
    telemetry_log: QueueTelemetry


class QueueRun:
    """One start of the queue: its store, random streams and filler."""

    def __init__(self, queue: QueueSettings) -> None:
        draws = LeastDrawn(queue.telemetry_log.counts, queue.seed)
        self.store = QueueStore(queue.budget, queue.capacity, queue.mode, draws, owner=queue)
        self.generator = torch.Generator().manual_seed(queue.seed)
        self.telemetry = queue.telemetry_log
        self.telemetry.watch(self.store)
        self.filler = Filler(
            self.store,
            queue.dataset,
            queue.preprocess,
            num_workers=queue.num_workers,
            worker_type=queue.worker_type,
            seed=queue.seed,
            multiprocessing_context=queue.multiprocessing_context,
        )

    def stop(self) -> None:
        self.filler.close()
        self.telemetry.absorb(self.store)
