"""What ``run.mode=plan`` says of a shards dataset, from its index alone (no shard is opened).

The shards (count, total and largest size), the samples, what one rank of the configured world size
takes of them under each ``balance``, and how the cache's ``limit`` compares with the largest shard.
"""

from __future__ import annotations

from typing import Any

from loaderfactory.components.order import BALANCE, Balance, rank_count
from loaderfactory.shards.cache import human_bytes
from loaderfactory.shards.dataset import ShardsDataset
from loaderfactory.shards.storage import is_remote


def mean_sample_bytes(dataset: ShardsDataset) -> int | None:
    """The shards' bytes per sample as stored (decoded samples may be larger); None when empty."""
    samples = len(dataset)
    return sum(info.bytes for info in dataset.shards) // samples if samples else None


def shards_plan(dataset: ShardsDataset, rank: int, world_size: int, balance: Balance) -> dict[str, Any]:
    """The plan's ``shards`` figures for ``rank`` of ``world_size`` under ``balance``."""
    largest = max(dataset.shards, key=lambda info: info.bytes)
    samples = len(dataset)
    per_rank = {name: rank_count(samples, rank, world_size, name) for name in BALANCE}
    return {
        "shards": len(dataset.shards),
        "bytes": sum(info.bytes for info in dataset.shards),
        "largest": {"url": largest.url, "bytes": largest.bytes},
        "samples": samples,
        "index": dataset.index_source,
        "balance": balance,
        "samples_per_rank": per_rank[balance],
        "samples_per_rank_by_balance": per_rank,
        "cache": _cache_bound(dataset, largest.bytes),
    }


def _cache_bound(dataset: ShardsDataset, largest: int) -> dict[str, Any]:
    remote = any(is_remote(info.url) for info in dataset.shards)
    cache = dataset.cache
    if cache is None:
        return {
            "dir": None,
            "limit": None,
            "bound": "remote shards read by byte ranges" if remote else "local shards read in place",
        }
    where = "a private temporary folder" if dataset.cache_is_private else str(cache.dir)
    if cache.limit is None:
        return {"dir": where, "limit": None, "bound": "no bound"}
    fits = cache.limit // largest if largest else None
    return {"dir": where, "limit": cache.limit, "largest_shards_that_fit": fits, "bound": "limit"}


def format_shards_plan(figures: dict[str, Any], steps: int | None) -> list[str]:
    """The plan's ``shards`` lines; ``steps``: the rank's batches per epoch as the loader counts them."""
    largest = figures["largest"]
    index = figures["index"]
    where = "none beside the shards: built now by reading each (save one: run.mode=index)"
    others = ", ".join(
        f"{name}: {count}"
        for name, count in figures["samples_per_rank_by_balance"].items()
        if name != figures["balance"]
    )
    return [
        f"shards: {figures['shards']} shard(s), {human_bytes(figures['bytes'])} in all, largest "
        f"{human_bytes(largest['bytes'])} ({largest['url']})",
        f"  index: {where if index == 'built' else index}",
        f"  samples: {figures['samples']}; per rank: {figures['samples_per_rank']} "
        f"(balance {figures['balance']}; {others}); steps per epoch: "
        f"{steps if steps is not None else 'unknown'}",
        f"  cache: {_cache_text(figures['cache'])}",
    ]


def _cache_text(cache: dict[str, Any]) -> str:
    if cache["dir"] is None:
        return f"none ({cache['bound']})"
    if cache["limit"] is None:
        return f"{cache['dir']}, no bound (cache.limit null: it grows to every shard read)"
    return (
        f"{cache['dir']}, cache.limit {human_bytes(cache['limit'])}: room for "
        f"{cache['largest_shards_that_fit']} of the largest shard"
    )
