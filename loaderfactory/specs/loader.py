"""Spec of the ``torch`` loader kind: a plain ``torch.utils.data.DataLoader``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, model_validator

from loaderfactory.specs.base import BatchSize, Count, Seed, Spec, Timeout, alias, refuse_unless
from loaderfactory.specs.refs import CollateRef


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
