"""Which sample each item of a bench_shards.py epoch is, and how often neighbours share a shard.

Every library reads the same items (bench_shards_write.py): item ``i``'s bytes start at offset
``(i * 7919) % (pool - item_bytes)`` of one random pool, so its first 8 bytes name it. An epoch
keeps those 8 bytes of each item as the loop receives it (a view of the batch, no copy of the
data); after the clock stops they become sample ids, and the ids become shards through each
library's own record of how many samples each shard holds. ``same shard`` is the share of
consecutive items that come from one shard (1.0: stored order; about 1/shards: a uniform shuffle);
``ids exact`` says whether the epoch delivered every id exactly once.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
from bench_shards_write import Items


def fingerprints(data: Any) -> np.ndarray:
    """The first 8 bytes of each row of a batch's uint8 data (a tensor or an array), as uint64."""
    rows = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
    rows = rows.reshape(rows.shape[0], -1)
    return np.ascontiguousarray(rows[:, :8]).view("<u8").reshape(-1)


def sample_ids(prints: np.ndarray, count: int, item_bytes: int) -> np.ndarray:
    """The sample ids of ``prints`` among the ``count`` items of ``item_bytes``; -1 where unknown."""
    pool = Items(count, item_bytes)._bytes()
    offsets = (np.arange(count, dtype=np.int64) * 7919) % (len(pool) - item_bytes)
    keys = np.zeros(count, dtype=np.uint64)
    for byte in range(8):
        keys |= pool[offsets + byte].astype(np.uint64) << np.uint64(8 * byte)
    order = np.argsort(keys)
    sorted_keys = keys[order]
    places = np.clip(np.searchsorted(sorted_keys, prints), 0, count - 1)
    return np.where(sorted_keys[places] == prints, order[places], -1)


def shard_counts(library: str, folder: Path) -> list[int]:
    """Samples per shard, in each library's shard order, from its own index (tar: its members)."""
    if library == "ours":
        entries = json.loads((folder / "loaderfactory-shards.json").read_text())["shards"]
        return [entry["samples"] for entry in sorted(entries, key=lambda entry: entry["url"])]
    if library == "litdata":
        return [chunk["chunk_size"] for chunk in json.loads((folder / "index.json").read_text())["chunks"]]
    if library == "mosaic":
        return [shard["samples"] for shard in json.loads((folder / "index.json").read_text())["shards"]]
    counts = []
    for path in sorted(folder.glob("*.tar")):
        with tarfile.open(path, mode="r:") as archive:
            counts.append(sum(member.name.endswith(".npy") for member in archive))
    return counts


def neighbours(run: dict[str, Any], prints: np.ndarray) -> dict[str, Any]:
    """``same_shard`` (share of consecutive items from one shard) and ``ids_exact`` of an epoch."""
    ids = sample_ids(prints, run["items"], run["item_bytes"])
    ends = np.cumsum(shard_counts(run.get("opener", run["library"]), Path(run["folder"])))
    shards = np.searchsorted(ends, ids, side="right")
    same = float(np.mean(shards[1:] == shards[:-1])) if len(ids) > 1 else 1.0
    exact = bool(len(ids) == run["items"] and (ids >= 0).all() and len(np.unique(ids)) == len(ids))
    return {"same_shard": same, "ids_exact": exact, "shard_count": len(ends)}
