"""Spec of the ``ram`` queue kind (:class:`~loaderfactory.components.queue.dataset.QueueDataset`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, StrictBool, model_validator

from loaderfactory.config.specs.base import (
    MAX_WORKERS,
    BatchSize,
    Finite,
    RamBudget,
    Seed,
    Timeout,
    alias,
    broken_rules,
)
from loaderfactory.config.specs.kinds import BatchingKindSpec
from loaderfactory.config.specs.refs import CollateRef, Transforms
from loaderfactory.rules import ring

MAX_ITEM_MB = 10**9
"""Largest ``avg_item_size`` (1 PB): no budget holds such an item, and far larger sizes overflow the
byte count (``1e308`` MB is ``inf`` bytes)."""


class QueueDatasetSpec(BatchingKindSpec):
    """Draw batches from items held in RAM, least drawn first, refilled by background workers.

    Each draw takes the held items drawn least often so far, ties broken at random, so every item
    is drawn about equally often. Use it when loading an item is much slower than a training step.
    Costs ``num_workers`` threads or processes and up to ``ram_budget`` of memory (plus one item
    per worker in flight). The ``loader`` slot then passes the queue's batches on without batching
    again.
    """

    speed_only = frozenset(
        {"timeout", "wait_fill_timeout", "on_fill_timeout", "log_sampling", "multiprocessing_context"}
    )

    kind: Literal["ram"] = "ram"
    epoch_size: PositiveInt = Field(1000, validation_alias=alias("epoch_size", "epoch_len"))
    """Batches per epoch."""
    mode: Literal["onsample", "always"] = "onsample"
    """``onsample``: each draw lets one new item in; ``always``: workers refill as fast as they load."""
    num_workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1
    """Loading workers that fill the queue."""
    worker_type: Literal["thread", "process"] = "thread"
    """``thread`` suits loading that releases the GIL (I/O, C decoding); ``process`` uses shared memory."""
    capacity: PositiveInt | None = Field(None, validation_alias=alias("capacity", "q_maxlen"))
    """Most items held; ``null``: from the budget and ``avg_item_size`` (at most the dataset's length)."""
    ram_budget: RamBudget = Field(0.5, validation_alias=alias("ram_budget", "ram_use"))
    """Memory the held items may use; the seed's ``ram_use`` > 1 means MB."""
    avg_item_size: Annotated[Finite, Field(gt=0, le=MAX_ITEM_MB)] | None = None
    """An item's size in MB; ``null`` measures items as they load."""
    wait_fill: StrictBool | PositiveInt = True
    """``true``: wait for a full queue before the first draw; an int: for that many items."""
    wait_fill_timeout: Timeout = 60.0
    """Seconds ``wait_fill`` may take (then see ``on_fill_timeout``); ``null``: forever."""
    on_fill_timeout: Literal["raise", "warn"] = "raise"
    """When ``wait_fill`` times out: raise a StallError, or warn and start drawing."""
    sample_transforms: Transforms = Field(None, validation_alias=alias("sample_transforms", "sample_tfm"))
    """Applied to each drawn item; the stored item stays unchanged."""
    batch_transforms: Transforms = Field(None, validation_alias=alias("batch_transforms", "batch_tfm"))
    """Applied to each collated batch."""
    preprocess: Transforms = Field(None, validation_alias=alias("preprocess", "preprocess_fn"))
    """Applied in the worker before an item enters the queue."""
    batch_size: BatchSize = Field(1, validation_alias=alias("batch_size", "bs"))
    """Items per batch; the ``loader`` slot does not batch again."""
    collate: CollateRef | None = Field(None, validation_alias=alias("collate", "collate_fn"))
    """``null``: the ``dict`` collate."""
    log_sampling: bool = False
    """Record fill level and item age per draw, summarised in the report."""
    timeout: Timeout = None
    """Seconds a draw may wait for the workers before a StallError; ``null``: forever."""
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None
    """Start method of process workers; ``null``: the platform's default."""
    seed: Seed | None = None
    """Seeds the index order, draws and transforms; ``null``: the root ``seed``, else random."""

    def collated_alive(self, held_after: int) -> tuple[int, str]:
        # The queue collates a batch when its consumer asks for one, in the consumer's thread.
        return ring.alive_in_consumer_thread(held_after), "the queue collates each batch when asked"

    @model_validator(mode="before")
    @classmethod
    def _ram_use_in_mb(cls, data: Any) -> Any:
        """torchvtk's ``ram_use``: ≤ 1 is a fraction, > 1 is a budget in MB."""
        if isinstance(data, dict):
            value = data.get("ram_use")
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 1:
                data = {**data, "ram_use": f"{value}MB"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> QueueDatasetSpec:
        """An int wait_fill is at most capacity; multiprocessing_context needs worker_type: process."""
        problems: list[tuple[str, str, Any]] = []
        waits_for = self.wait_fill if not isinstance(self.wait_fill, bool) else None
        if waits_for is not None and self.capacity is not None and waits_for > self.capacity:
            problems.append(
                (
                    "wait_fill",
                    f"waits for more items than capacity ({self.capacity}) can hold; lower it",
                    waits_for,
                )
            )
        if self.multiprocessing_context is not None and self.worker_type != "process":
            problems.append(
                (
                    "multiprocessing_context",
                    "only applies to process workers; set worker_type: process or drop it",
                    self.multiprocessing_context,
                )
            )
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self
