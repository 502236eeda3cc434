"""Work done once on rank 0 and shared with the other ranks (listing shards, reading the index).

Without an initialised ``torch.distributed`` group (or with one rank) the work simply runs here. With
one, only rank 0 runs it and ``broadcast_object_list`` hands the result to every rank, so a thousand
ranks do not list a bucket or read the index a thousand times. A failure on rank 0 is sent instead
of a result, so the other ranks raise too rather than waiting forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from loaderfactory.shards.errors import ShardError

T = TypeVar("T")


def _group_size_and_rank() -> tuple[int, int]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1, 0
    return dist.get_world_size(), dist.get_rank()


def on_rank_zero(work: Callable[[], T], what: str) -> T:
    """``work()`` on rank 0, its result broadcast to every rank; here alone when not distributed.

    Args:
        work: what to run once; its result must pickle.
        what: names the work in the error other ranks raise when rank 0's failed.
    """
    world_size, rank = _group_size_and_rank()
    if world_size == 1:
        return work()
    import torch.distributed as dist

    sent: list[Any] = [None]
    failure: BaseException | None = None
    if rank == 0:
        try:
            sent[0] = ("ok", work())
        except Exception as err:  # noqa: BLE001 - re-raised below, once the other ranks have heard of it
            failure = err
            sent[0] = ("failed", f"{type(err).__name__}: {err}")
    dist.broadcast_object_list(sent, src=0)
    if failure is not None:
        raise failure
    status, value = sent[0]
    if status != "ok":
        raise ShardError(f"{what} failed on rank 0: {value}")
    return value  # type: ignore[no-any-return]  # what rank 0's work() returned
