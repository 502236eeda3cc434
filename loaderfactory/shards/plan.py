"""What ``run.mode=plan`` says of a shards dataset, from its index alone (no shard is opened).

The shards (count, total and largest size), the samples, what one rank of the configured world size
takes of them under each ``balance``, how the cache's ``limit`` compares with the largest shard, and
the shuffle's window: how many shards it mixes, the bytes it holds, the shards a batch sees, and a
warning when shuffled batches would see few shards (or the window cannot be held).
"""

from __future__ import annotations

from typing import Any

from loaderfactory.components.order import BALANCE, Balance, rank_count
from loaderfactory.shards.dataset import ShardsDataset
from loaderfactory.shards.shuffle_window import (
    few_shards_per_batch,
    shards_per_batch,
    window_bytes,
    window_for,
)
from loaderfactory.shards.storage.cache import human_bytes
from loaderfactory.shards.storage.store import is_remote


def mean_sample_bytes(dataset: ShardsDataset) -> int | None:
    """The shards' bytes per sample as stored (decoded samples may be larger); None when empty."""
    samples = len(dataset)
    return sum(info.bytes for info in dataset.shards) // samples if samples else None


def shards_plan(
    dataset: ShardsDataset,
    rank: int,
    world_size: int,
    balance: Balance,
    batch_size: int = 1,
    shuffled: bool = False,
) -> dict[str, Any]:
    """The plan's ``shards`` figures for ``rank`` of ``world_size`` under ``balance``; the shuffle's
    with batches of ``batch_size`` samples, warned about when the loader ``shuffled``."""
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
        "shuffle": shuffle_plan(dataset, batch_size, shuffled),
    }


def shuffle_plan(dataset: ShardsDataset, batch_size: int, shuffled: bool) -> dict[str, Any]:
    """The shuffle's window, what it holds, the shards a batch sees, and what to warn about."""
    sizes = [info.bytes for info in dataset.shards]
    window, shards = dataset.shuffle_window, len(sizes)
    remote = any(is_remote(info.url) for info in dataset.shards)
    seen = shards_per_batch(window, batch_size)
    warnings = []
    problem = dataset.window_problem()
    if problem is not None:
        warnings.append(f"a shuffled epoch will refuse to start: {problem}")
    if shuffled and window < shards and seen < few_shards_per_batch(batch_size):
        wider = window_for(batch_size, shards)
        fix = (
            f"dataset.shuffle_memory={_size_text(window_bytes(sizes, wider))} (a window of {wider} shards)"
            if dataset.shuffle_window_setting == "auto"
            else f"dataset.shuffle_window={wider} (or shuffle_window=auto)"
        )
        warnings.append(
            f"a shuffled batch of {batch_size} sees about {seen:.1f} of the {shards} shards (shuffle_window"
            f" {window}): data stored in class order gives batches of few classes; set {fix},"
            " or write the shards in random order (pack.shuffle=true)"
        )
    return {
        "shuffled": shuffled,
        "window": window,
        "setting": dataset.shuffle_window_setting,
        "memory": dataset.shuffle_memory,
        "holds_bytes": window_bytes(sizes, window),
        "held_in": "the cache" if remote else "the page cache",
        "open_shards": dataset.open_shards,
        "shards_per_batch": round(seen, 2),
        "warnings": warnings,
    }


def _size_text(size: int) -> str:
    """``size`` rounded up to whole MiB, as a spec size string (``1536MiB``)."""
    return f"{-(-size // 2**20)}MiB"


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
        *_shuffle_lines(figures["shuffle"], figures["shards"]),
    ]


def _shuffle_lines(shuffle: dict[str, Any], shards: int) -> list[str]:
    how = (
        f"auto: as many of the largest shard as fit in shuffle_memory {human_bytes(shuffle['memory'])}"
        if shuffle["setting"] == "auto"
        else "shuffle_window"
    )
    lines = [
        f"  shuffle: {'on' if shuffle['shuffled'] else 'off'}; a window of {shuffle['window']} of {shards}"
        f" shard(s) ({how}) holds up to {human_bytes(shuffle['holds_bytes'])} in {shuffle['held_in']},"
        f" open_shards {shuffle['open_shards']} per process; a shuffled batch sees about"
        f" {shuffle['shards_per_batch']:.1f} shard(s)"
    ]
    return lines + [f"  warning: {warning}" for warning in shuffle["warnings"]]


def _cache_text(cache: dict[str, Any]) -> str:
    if cache["dir"] is None:
        return f"none ({cache['bound']})"
    if cache["limit"] is None:
        return f"{cache['dir']}, no bound (cache.limit null: it grows to every shard read)"
    return (
        f"{cache['dir']}, cache.limit {human_bytes(cache['limit'])}: room for "
        f"{cache['largest_shards_that_fit']} of the largest shard"
    )
