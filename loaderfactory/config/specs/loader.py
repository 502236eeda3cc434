"""Spec of the ``torch`` loader kind: a plain ``torch.utils.data.DataLoader``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeInt, model_validator

from loaderfactory.config.specs.base import BatchSize, Count, Seed, Spec, Timeout, alias, refuse_unless
from loaderfactory.config.specs.refs import CollateRef


class TorchLoaderSpec(Spec):
    """Batch with ``torch.utils.data.DataLoader``; its process workers run the dataset.

    Costs ``num_workers`` processes, each holding up to ``prefetch_factor`` batches.
    """

    kind: Literal["torch"] = "torch"
    batch_size: BatchSize = Field(32, validation_alias=alias("batch_size", "bs"))
    """Items per batch."""
    shuffle: bool = False
    """Reshuffle every epoch (seeded by `seed`)."""
    drop_last: bool = False
    """Drop the last incomplete batch."""
    num_workers: NonNegativeInt = 0
    """Worker processes; 0 loads in the main process."""
    prefetch_factor: Count | None = None
    """Batches each worker loads ahead; needs workers."""
    persistent_workers: bool = False
    """Keep workers alive across epochs; needs workers."""
    pin_memory: bool = False
    """Pin batches for fast transfer; a no-op without an accelerator."""
    timeout: Timeout = None
    """Seconds to wait for a worker batch; needs workers."""
    collate: CollateRef | None = None
    """Collate function; null is torch's default_collate."""
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None
    """Start method of the workers; needs workers."""
    seed: Seed | None = None
    """Shuffle seed; null falls back to the root `seed`."""

    def refuse_after_batches(self, batch_size: int | None) -> list[tuple[str, str, Any]]:
        problems: list[tuple[str, str, Any]] = []
        if self.shuffle:
            problems.append(("shuffle", "the queue already samples at random; set it to false", True))
        if self.drop_last:
            problems.append(("drop_last", "the queue yields whole batches; set it to false", True))
        if self.num_workers > 0:
            problems.append(
                (
                    "num_workers",
                    "the queue loads with its own workers (queue.num_workers); DataLoader workers would "
                    "each copy the whole queue: set it to 0",
                    self.num_workers,
                )
            )
        if batch_size is not None and "batch_size" in self.model_fields_set and self.batch_size != batch_size:
            problems.append(
                (
                    "batch_size",
                    f"the queue draws the batches (queue.batch_size={batch_size}); set queue.batch_size "
                    "instead (the torch preset follows it)",
                    self.batch_size,
                )
            )
        return problems

    @model_validator(mode="after")
    def _worker_options_need_workers(self) -> TorchLoaderSpec:
        options = ("prefetch_factor", "persistent_workers", "timeout", "multiprocessing_context")
        refuse_unless(
            self.num_workers > 0,
            type(self).__name__,
            {name: getattr(self, name) for name in options},
            "needs worker processes, but num_workers is 0; set num_workers >= 1",
        )
        return self
