"""A shuffled read of Parquet shards written by ``pack`` reads each row group once per visit of its
shard, not once per sample: bytes read stay near the files' size, every id once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import Dataset

from loaderfactory import build_loader
from loaderfactory.shards import ShardsDataset, pack, pack_writers

ITEMS = 240
ITEM_BYTES = 4096


class Blobs(Dataset[dict[str, Any]]):
    """Items of incompressible bytes (random, seeded by the id), so a row group's size is its data."""

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"id": i, "blob": np.random.default_rng(i).bytes(ITEM_BYTES)}


@pytest.fixture
def packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """Two Parquet shards of ~16 row groups each, as ``pack`` cuts a 256 MiB shard into 8 MiB row
    groups (the row groups made 64 KiB here to keep the files small); the folder and its bytes."""
    monkeypatch.setattr(pack_writers, "_ROW_GROUP_BYTES", 16 * ITEM_BYTES)
    out = tmp_path / "parquet"
    result = pack(
        Blobs(), str(out), shard_size=ITEMS * ITEM_BYTES // 2 + 2**16, format="parquet", progress=False
    )
    assert len(result.shards) == 2
    return f"{out}/", sum(info.bytes for info in result.shards)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_shuffled_epoch_reads_each_row_group_once(packed: tuple[str, int], num_workers: int) -> None:
    """Shuffled within each shard (``shuffle_window: 1``), batches of 8: each reading process reads
    each row group once, so the bytes read stay within the files' size once per process (plus the
    footers each open reads)."""
    urls, size = packed
    shards = ShardsDataset(urls, progress=False)
    loader = {"kind": "torch", "batch_size": 8, "shuffle": True, "num_workers": num_workers}
    with build_loader({"loader": loader, "seed": 3}, dataset=shards) as run:
        ids = [int(i) for batch in run for i in batch["id.cls"]]
    assert sorted(ids) == list(range(ITEMS))
    stats = shards.stats()
    readers = max(1, num_workers)
    groups = ITEMS // 16
    assert stats["bytes_read_local"] <= readers * size * 1.5, stats
    assert stats["row_groups_read"] <= readers * (groups + 2)
    assert stats["samples_read"] == ITEMS
