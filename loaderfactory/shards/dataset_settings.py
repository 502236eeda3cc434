"""A ``ShardsDataset``'s settings checked and derived from its arguments: their ranges, whether local
shards are read ahead, and the private cache's bound."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from loaderfactory.shards.index.shard_index import ShardInfo
from loaderfactory.shards.read.predownload import THREADS
from loaderfactory.shards.read.read_ahead import job_spans_machines
from loaderfactory.shards.read.read_ahead import supported as read_ahead_supported
from loaderfactory.shards.shuffle_window import resolve_window
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.store import is_remote

log = logging.getLogger(__name__)


def check_arguments(
    open_shards: int | None, shuffle_window: int | str, predownload: int, fetch: str, cache_dir: str | None
) -> None:
    """ValueError for an argument out of its range, or ``fetch="range"`` with a cache."""
    if open_shards is not None and open_shards < 1:
        raise ValueError(f"open_shards must be ≥ 1, got {open_shards}")
    resolve_window(shuffle_window, [], 1)  # "auto" or a count ≥ 1
    if predownload < 0:
        raise ValueError(f"predownload must be ≥ 0, got {predownload}")
    if fetch not in ("whole", "range"):
        raise ValueError(f"fetch must be 'whole' or 'range', got {fetch!r}")
    if fetch == "range" and (cache_dir is not None or predownload):
        raise ValueError(
            "fetch='range' reads remote shards by byte ranges, without a cache: set fetch='whole' to "
            "use cache_dir or predownload, or drop them"
        )


def read_ahead_setting(local_read_ahead: bool) -> bool:
    """``local_read_ahead``, off where the platform lacks positioned reads or the job's ranks span
    machines (each reads part of each shard)."""
    if not (local_read_ahead and read_ahead_supported()):
        return False
    if job_spans_machines():
        log.info("local_read_ahead off: the job's ranks span machines, each reading part of each shard")
        return False
    return True


def private_cache_limit(shards: Sequence[ShardInfo], open_shards: int, predownload: int) -> int:
    """The private cache's bound: the largest remote shard times what may be held at once (the
    ``open_shards``, one being fetched, and the shards of ``predownload`` samples ahead)."""
    remote = [info for info in shards if is_remote(info.url)]
    largest = max((info.bytes for info in remote), default=0) or 1
    fewest = max(1, min((info.samples for info in remote), default=1))
    ahead = min(len(remote), max(THREADS, 1 + -(-predownload // fewest))) if predownload else 0
    return largest * (open_shards + 1 + ahead)


def check_cache_limit(cache: ShardCache | None, shards: Sequence[ShardInfo]) -> None:
    """Refuse a cache limit below the largest remote shard before anything is fetched."""
    remote = [info for info in shards if is_remote(info.url)]
    if cache is not None and cache.limit is not None and remote:
        largest = max(remote, key=lambda info: info.bytes)
        cache.check_fits(largest.url, largest.bytes)
