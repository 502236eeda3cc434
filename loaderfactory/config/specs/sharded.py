"""Spec of the ``sharded`` loader kind: :class:`~loaderfactory.components.steps.ShardedDataLoader`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from loaderfactory.config.specs.base import (
    RULE,
    BatchSize,
    Count,
    NumWorkers,
    Seed,
    Spec,
    Timeout,
    WorkersSpec,
    alias,
    broken_rules,
)
from loaderfactory.config.specs.kinds import LoaderKindSpec
from loaderfactory.config.specs.refs import CollateRef
from loaderfactory.config.specs.target import SamplerTargetSpec
from loaderfactory.rules import epochs as epoch_rules
from loaderfactory.rules import ring
from loaderfactory.rules import sharded as sharded_rules


class DistributedSpec(Spec):
    """This process's place among data-parallel processes, given explicitly."""

    rank: NonNegativeInt
    """This process's rank, counted from 0."""
    world_size: Count
    """Number of data-parallel processes."""

    @model_validator(mode="after")
    def _rank_in_range(self) -> DistributedSpec:
        """rank is less than world_size."""
        if self.rank >= self.world_size:
            raise broken_rules(
                type(self).__name__,
                [("rank", f"must be < world_size ({self.world_size}), got {self.rank}", self.rank)],
            )
        return self


def _one_distributed_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One error at the right place instead of one per union member."""
    if isinstance(value, DistributedSpec):
        return value
    if isinstance(value, dict):
        return DistributedSpec.model_validate(value)
    if value in ("auto", "off"):
        return value
    raise PydanticCustomError(RULE, f"must be 'auto', 'off' or {{rank: R, world_size: W}}, got {value!r}")


Distributed = Annotated[Literal["auto", "off"] | DistributedSpec, WrapValidator(_one_distributed_error)]
"""``auto`` (read torch.distributed or torchrun's environment at build time), ``off``, or explicit."""


class ShardedLoaderSpec(WorkersSpec, LoaderKindSpec):
    """Batch with ``ShardedDataLoader``: one batch per shard, thread or process workers, rank-aware.
    The seed's ``thread_pool: true/false`` is accepted for ``worker_type: thread/process`` (not both).

    Costs ``num_workers`` processes (or threads) and ``prefetch`` steps in flight (default 2 per
    worker). ``distributed: auto`` reads ``torch.distributed`` or torchrun's environment once,
    when the loader is built; ``off`` loads everything in this process; ``{rank, world_size}``
    says it explicitly. ``balance`` gives every rank the same steps per epoch: ``pad`` (wrap
    around), ``drop`` (skip the last few) or ``uneven`` (neither; needs ``Join`` in training).
    The aliases (``bs``, ``batchify_fn``, ``thread_pool``) and every cross-field rule live here;
    the builder passes canonical arguments to the component.
    """

    rank_only = frozenset({"distributed"})
    speed_only = frozenset(
        {
            "num_workers",  # the shard plan decides the steps; workers only load them, in order
            "worker_type",
            "prefetch",
            "persistent_workers",
            "pin_memory",
            "timeout",
            "multiprocessing_context",
        }
    )

    value_aliases = {"thread_pool": "worker_type"}

    kind: Literal["sharded"] = "sharded"
    # WorkersSpec's fields again, unchanged, to document them for this kind
    num_workers: NumWorkers = 0
    """Background workers; 0 loads in the consumer's thread."""
    worker_type: Literal["thread", "process"] = "process"
    """``process``: forked, shared-memory batches; ``thread``: shares the dataset (``thread_pool: true``)."""
    batch_size: BatchSize | None = Field(None, validation_alias=alias("batch_size", "bs"))
    """Indices per batch; required unless ``batch_sampler`` is set."""
    shuffle: bool = False
    """A new order every epoch, seeded by (``seed``, epoch), the same on every rank."""
    sampler: SamplerTargetSpec | None = None
    """Gives the index order (its ``set_epoch`` is called each epoch); excludes ``shuffle``."""
    last_batch: Literal["keep", "discard", "rollover"] = "keep"
    """The rest that fills no whole step: yield it short, drop it, or carry it into the next epoch."""
    batch_sampler: SamplerTargetSpec | None = None
    """Yields whole steps (index lists, or one list per shard); excludes the batching fields."""
    collate: CollateRef | None = Field(None, validation_alias=alias("collate", "batchify_fn"))
    """Merges a list of items into a batch; ``null``: torch's ``default_collate``."""
    pin_memory: bool = False
    """Pin batches for fast host-to-device copies; a no-op without an accelerator."""
    prefetch: Count | None = None
    """Steps in flight at most; ``null``: 2 per worker. Needs workers."""
    num_shards: Count = 1
    """Batches per step; > 1 yields a list of that many (one per device, say)."""
    seed: Seed | None = None
    """Seeds the shuffle and the workers; ``null``: the root ``seed``, else one all ranks agree on."""
    distributed: Distributed = "auto"
    """``auto``: torch.distributed or torchrun's environment at build; ``off``: one process; or explicit."""
    balance: Literal["pad", "drop", "uneven"] = "pad"
    """Equal steps per rank: ``pad`` wraps around, ``drop`` skips the last few, ``uneven`` needs ``Join``."""
    persistent_workers: bool = False
    """Keep the workers between complete epochs; needs workers."""
    timeout: Timeout = None
    """Seconds to wait for a worker's batch before a StallError; ``null``: forever. Needs workers."""
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None
    """Start method of process workers; ``null``: ``fork`` where available."""

    def collated_alive(self, held_after: int) -> tuple[int, str]:
        workers, shards = self.num_workers, self.num_shards
        per_step = f"; loader.num_shards={shards} batches per step" if shards > 1 else ""
        if workers == 0:
            alive = ring.alive_in_consumer_thread(held_after, shards)
            return alive, "loader.num_workers=0: collated in your loop" + per_step
        in_flight = self.prefetch if self.prefetch is not None else 2 * workers
        if self.worker_type == "process":
            ahead = math.ceil(in_flight / workers)  # ProcessWorkers' prefetch_factor
            alive = ring.alive_per_worker_process(held_after, workers, ahead, True, shards)
            why = (
                f"loader.num_workers={workers} worker processes, each with its own ring, loader.prefetch="
                f"{in_flight} steps in flight ({ahead} per worker), plus one per {workers} held after it"
            )
            return alive, why + per_step
        alive = ring.alive_in_thread_workers(held_after, workers, in_flight, shards)
        why = f"loader.num_workers={workers} thread workers share the ring, loader.prefetch={in_flight} ahead"
        if workers > 1:
            why += ", collated out of step order"
        return alive, why + per_step

    def empty_epoch_problems(
        self, length: int, length_source: str, world_size: int | None = None
    ) -> list[tuple[str, str, Any]]:
        if self.sampler is not None or self.batch_sampler is not None or self.batch_size is None:
            return []  # the sampler decides how many
        if world_size is None:
            world_size = self.distributed.world_size if isinstance(self.distributed, DistributedSpec) else 1
        return epoch_rules.sharded_epoch_problems(
            length, length_source, self.batch_size, self.num_shards, self.last_batch, world_size, self.balance
        )

    def refuse_after_batches(self, batch_size: int | None) -> list[tuple[str, str, Any]]:
        return [
            (
                "kind",
                "sharded draws its own batches (and shards) from a map-style dataset, but the queue slot "
                "already yields batches; drop the queue or use loader=torch after it",
                "sharded",
            )
        ]

    @model_validator(mode="before")
    @classmethod
    def _thread_pool_alias(cls, data: Any) -> Any:
        """The seed's ``thread_pool: true`` means ``worker_type: thread``.

        Given with ``worker_type`` (the ``sharded`` preset lists it: drop it with
        ``~loader.worker_type``), it is left for ``_one_name_per_field`` to refuse like any alias pair.
        """
        if not isinstance(data, dict) or "thread_pool" not in data or "worker_type" in data:
            return data
        data = dict(data)
        thread_pool = data.pop("thread_pool")
        if not isinstance(thread_pool, bool):
            raise broken_rules(
                cls.__name__, [("thread_pool", f"must be true or false, got {thread_pool!r}", thread_pool)]
            )
        data["worker_type"] = "thread" if thread_pool else "process"
        return data

    @model_validator(mode="after")
    def _rules(self) -> ShardedLoaderSpec:
        """batch_sampler excludes batch_size, shuffle, sampler, last_batch and num_shards, and batch_size is
        required without it; a sampler excludes shuffle; prefetch, persistent_workers, timeout and
        multiprocessing_context need num_workers >= 1, multiprocessing_context also worker_type: process."""
        sampler = self.sampler.target if self.sampler is not None else None
        batch_sampler = self.batch_sampler.target if self.batch_sampler is not None else None
        problems = sharded_rules.sampling_problems(
            self.batch_size, self.shuffle, sampler, self.last_batch, batch_sampler, self.num_shards
        )
        problems += sharded_rules.worker_problems(
            self.num_workers,
            self.worker_type,
            self.prefetch,
            self.persistent_workers,
            self.timeout,
            self.multiprocessing_context,
        )
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self
