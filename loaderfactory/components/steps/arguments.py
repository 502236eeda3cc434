"""The cheap checks of :class:`~loaderfactory.components.steps.ShardedDataLoader`'s arguments.

Each raises :class:`~loaderfactory.errors.ArgumentError` (a ``ValueError``) naming the argument to
change, so a builder can point at its config field. The rules across arguments are
:mod:`loaderfactory.rules.sharded`'s, which the spec reports all at once.
"""

from __future__ import annotations

from loaderfactory.components.steps.sampling import BALANCE, LAST_BATCH
from loaderfactory.errors import ArgumentError
from loaderfactory.rules import raise_first
from loaderfactory.rules.sharded import sampling_problems


def check_sampling(
    batch_size: int | None,
    shuffle: bool,
    sampler: object,
    last_batch: str,
    batch_sampler: object,
    num_shards: int,
    balance: str,
) -> None:
    """The seed's argument rules."""
    if last_batch not in LAST_BATCH:
        raise ArgumentError(
            "last_batch", f"last_batch must be one of {', '.join(LAST_BATCH)}, got {last_batch!r}"
        )
    if balance not in BALANCE:
        raise ArgumentError("balance", f"balance must be one of {', '.join(BALANCE)}, got {balance!r}")
    if num_shards < 1:
        raise ArgumentError("num_shards", f"num_shards must be >= 1, got {num_shards}")
    raise_first(sampling_problems(batch_size, shuffle, sampler, last_batch, batch_sampler, num_shards))
    if batch_size is not None and batch_size < 1:
        raise ArgumentError("batch_size", f"batch_size must be >= 1, got {batch_size}")


def check_workers(worker_type: str, num_workers: int, prefetch: int | None, timeout: float | None) -> None:
    """The workers' arguments."""
    if worker_type not in ("process", "thread"):
        raise ArgumentError("worker_type", f"worker_type must be 'process' or 'thread', got {worker_type!r}")
    if num_workers < 0:
        raise ArgumentError("num_workers", f"num_workers must be >= 0, got {num_workers}")
    if prefetch is not None and prefetch < 0:
        raise ArgumentError("prefetch", f"prefetch must be >= 0, got {prefetch}")
    if timeout is not None and timeout <= 0:
        raise ArgumentError("timeout", f"timeout must be > 0 or None, got {timeout}")


def place(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)``, ``(0, 1)`` for a single process."""
    if (rank is None) != (world_size is None):
        raise ArgumentError("rank", "give rank and world_size together (or neither, for a single process)")
    if rank is None or world_size is None:
        return 0, 1
    if world_size < 1 or not 0 <= rank < world_size:
        raise ArgumentError(
            "rank", f"rank must be in [0, world_size) and world_size >= 1, got {rank} of {world_size}"
        )
    return rank, world_size
