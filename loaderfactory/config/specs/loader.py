"""Spec of the ``torch`` loader kind: a plain ``torch.utils.data.DataLoader``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from loaderfactory.config.specs.base import (
    BatchSize,
    Count,
    NumWorkers,
    Seed,
    Timeout,
    alias,
    broken_rules,
    refuse_unless,
)
from loaderfactory.config.specs.kinds import LoaderKindSpec
from loaderfactory.config.specs.refs import CollateRef
from loaderfactory.config.specs.sharded import Distributed, DistributedSpec
from loaderfactory.config.specs.target import CallableTargetSpec, SamplerTargetSpec
from loaderfactory.rules import epochs as epoch_rules
from loaderfactory.rules import ring
from loaderfactory.rules import torch_loader as torch_rules


class TorchLoaderSpec(LoaderKindSpec):
    """Batch with ``torch.utils.data.DataLoader``; its process workers run the dataset.

    Every ``DataLoader`` argument has a field of the same name (``collate_fn`` is accepted for
    ``collate``); ``sampler``, ``batch_sampler``, ``collate`` and ``worker_init_fn`` are
    ``_target_`` nodes. Under ``torch.distributed`` each rank loads its part of a shared
    per-epoch order (``distributed``, ``balance``). Costs ``num_workers`` processes, each
    holding up to ``prefetch_factor`` batches.
    """

    rank_only = frozenset({"distributed"})
    speed_only = frozenset(
        {
            "num_workers",  # the sampler, in this process, decides the order of a map-style dataset
            "prefetch_factor",
            "persistent_workers",
            "pin_memory",
            "pin_memory_device",
            "timeout",
            "multiprocessing_context",
        }
    )

    kind: Literal["torch"] = "torch"
    batch_size: BatchSize | None = Field(32, validation_alias=alias("batch_size", "bs"))
    """Items per batch; null passes items through unbatched (torch's batch_size=None)."""
    shuffle: bool = False
    """Reshuffle every epoch (seeded by `seed`)."""
    sampler: SamplerTargetSpec | None = None
    """{_target_: ...} giving the order of the indices; excludes shuffle. Gets the dataset as data_source."""
    batch_sampler: SamplerTargetSpec | None = None
    """{_target_: ...} yielding lists of indices; excludes batch_size (null), shuffle, sampler, drop_last."""
    drop_last: bool = False
    """Drop the last incomplete batch."""
    num_workers: NumWorkers = 0
    """Worker processes; 0 loads in the main process."""
    prefetch_factor: Count | None = None
    """Batches each worker loads ahead; needs workers."""
    persistent_workers: bool = False
    """Keep workers alive across epochs; needs workers."""
    pin_memory: bool = False
    """Pin batches for fast transfer; a no-op without an accelerator."""
    pin_memory_device: str | None = None
    """Device to pin for (torch's pin_memory_device); null: the current accelerator. Needs pin_memory."""
    timeout: Timeout = None
    """Seconds to wait for a worker batch; needs workers."""
    collate: CollateRef | None = Field(None, validation_alias=alias("collate", "collate_fn"))
    """Collate function (alias collate_fn); null is torch's default_collate."""
    worker_init_fn: CallableTargetSpec | None = None
    """{_target_: my.fn, _partial_: true}, called in each worker with its id; needs workers."""
    in_order: bool = True
    """Batches in sampler order; false (needs workers) yields whichever worker is done first."""
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None
    """Start method of the workers; needs workers."""
    seed: Seed | None = None
    """Shuffle seed; null: the root `seed`, else one all ranks agree on (PL_GLOBAL_SEED first)."""
    distributed: Distributed = "auto"
    """`auto`: torch.distributed or torchrun's environment; `off`: every rank reads all; or explicit."""
    balance: Literal["pad", "drop", "uneven"] = "pad"
    """Equal parts per rank by wrapping around (`pad`) or cutting (`drop`); `uneven` needs Join."""

    def collated_alive(self, held_after: int) -> tuple[int, str]:
        if self.num_workers == 0:
            return ring.alive_in_consumer_thread(held_after), "loader.num_workers=0: collated in your loop"
        ahead = self.prefetch_factor or 2  # torch's default with workers
        alive = ring.alive_per_worker_process(held_after, self.num_workers, ahead, self.in_order)
        downstream = (
            f"plus one per {self.num_workers} held after it"
            if self.in_order
            else "plus every batch held after it (loader.in_order=false)"
        )
        why = (
            f"loader.num_workers={self.num_workers}: each worker process has its own ring and collates "
            f"up to loader.prefetch_factor={ahead} batches ahead, {downstream}"
        )
        return alive, why

    def empty_epoch_problems(
        self, length: int, length_source: str, world_size: int | None = None
    ) -> list[tuple[str, str, Any]]:
        if self.sampler is not None or self.batch_sampler is not None:
            return []  # the sampler decides how many
        if world_size is None:
            world_size = self.distributed.world_size if isinstance(self.distributed, DistributedSpec) else 1
        return epoch_rules.torch_epoch_problems(
            length, length_source, self.batch_size, self.drop_last, world_size, self.balance
        )

    def refuse_after_batches(self, batch_size: int | None) -> list[tuple[str, str, Any]]:
        problems: list[tuple[str, str, Any]] = []
        if self.shuffle:
            problems.append(("shuffle", "the queue already samples at random; set it to false", True))
        if self.drop_last:
            problems.append(("drop_last", "the queue yields whole batches; set it to false", True))
        for name in ("sampler", "batch_sampler"):
            if getattr(self, name) is not None:
                problems.append(
                    (name, "the queue draws the batches itself; drop the " + name, getattr(self, name).target)
                )
        if self.num_workers > 0:
            problems.append(
                (
                    "num_workers",
                    "the queue loads with its own workers (queue.num_workers); DataLoader workers would "
                    "each copy the whole queue: set it to 0",
                    self.num_workers,
                )
            )
        if (
            batch_size is not None
            and "batch_size" in self.model_fields_set
            and self.batch_size not in (None, batch_size)
        ):
            problems.append(
                (
                    "batch_size",
                    f"the queue draws the batches (queue.batch_size={batch_size}); set queue.batch_size "
                    "instead (the torch preset follows it)",
                    self.batch_size,
                )
            )
        return problems

    @model_validator(mode="before")
    @classmethod
    def _batch_sampler_means_no_batch_size(cls, data: Any) -> Any:
        """A batch_sampler with no batch_size written means batch_size null, as in torch's DataLoader."""
        written = isinstance(data, dict) and bool({"batch_size", "bs"} & set(data))
        if isinstance(data, dict) and data.get("batch_sampler") is not None and not written:
            return {**data, "batch_size": None}
        return data

    @model_validator(mode="after")
    def _worker_options_need_workers(self) -> TorchLoaderSpec:
        """prefetch_factor, persistent_workers, timeout, multiprocessing_context, worker_init_fn and
        in_order: false need num_workers >= 1; pin_memory_device needs pin_memory."""
        title = type(self).__name__
        options = (
            "prefetch_factor",
            "persistent_workers",
            "timeout",
            "multiprocessing_context",
            "worker_init_fn",
        )
        given = {name: getattr(self, name) for name in options}
        given["in_order"] = None if self.in_order else "false"  # the order of workers' batches
        refuse_unless(
            self.num_workers > 0,
            title,
            given,
            "needs worker processes, but num_workers is 0; set num_workers >= 1",
        )
        refuse_unless(
            self.pin_memory,
            title,
            {"pin_memory_device": self.pin_memory_device},
            "pins for a device, but pin_memory is false; set pin_memory: true",
        )
        return self

    @model_validator(mode="after")
    def _torch_sampling_rules(self) -> TorchLoaderSpec:
        """torch's own rules, by field: batch_sampler excludes batch_size (null), shuffle, sampler and
        drop_last; a sampler excludes shuffle; drop_last needs a batch_size."""
        sampler = self.sampler.target if self.sampler is not None else None
        problems = torch_rules.sampling_problems(
            self.batch_size, self.shuffle, sampler, self.batch_sampler, self.drop_last
        )
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self
