"""A shuffled read of Parquet shards written by ``pack`` reads each row group once per visit of its
shard, not once per sample: bytes read stay near the files' size, every id once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import Dataset

from loaderfactory import build_loader
from loaderfactory.shards import ShardsDataset, pack
from loaderfactory.shards.formats import row_groups_held
from loaderfactory.shards.write import writers as pack_writers

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
        ids = [int(i) for batch in run for i in batch["id"]]
    assert sorted(ids) == list(range(ITEMS))
    stats = shards.stats()
    readers = max(1, num_workers)
    groups = ITEMS // 16
    assert stats["bytes_read_local"] <= readers * size * 1.5, stats
    assert stats["row_groups_read"] <= readers * (groups + 2)
    assert stats["samples_read"] == ITEMS


def test_the_row_groups_held_stay_within_one_budget_for_every_open_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four Parquet shards open at once (``open_shards: 4``, one window of all four), the budget made
    three row groups: the decoded row groups the process holds stay within it for all the shards
    together (the ledger's count and Arrow's own allocations both), every id once."""
    import pyarrow.parquet

    monkeypatch.setattr(pack_writers, "_ROW_GROUP_BYTES", 16 * ITEM_BYTES)
    out = tmp_path / "parquet"
    result = pack(
        Blobs(), str(out), shard_size=ITEMS * ITEM_BYTES // 4 + 2**16, format="parquet", progress=False
    )
    assert len(result.shards) == 4
    shards = ShardsDataset(f"{out}/", progress=False, open_shards=4, shuffle_window=4)
    footers = [pyarrow.parquet.ParquetFile(info.url).metadata for info in result.shards]
    group_bytes = max(m.row_group(g).total_byte_size for m in footers for g in range(m.num_row_groups))
    budget = 3 * group_bytes
    monkeypatch.setattr(row_groups_held, "ROW_GROUPS_HELD_BYTES", budget)
    ledger = row_groups_held.held_row_groups()
    before = pyarrow.total_allocated_bytes()
    held, allocated, ids = [], [], []
    loader = {"kind": "torch", "batch_size": 8, "shuffle": True}
    with build_loader({"loader": loader, "seed": 3}, dataset=shards) as run:
        for batch in run:
            ids += [int(i) for i in batch["id"]]
            held.append(ledger.held_bytes)
            allocated.append(pyarrow.total_allocated_bytes() - before)
    assert sorted(ids) == list(range(ITEMS))
    assert shards.stats()["shards_opened"] == 4  # all four were open together
    assert max(allocated) <= budget + group_bytes, (allocated, budget)
    assert 2 * group_bytes <= max(held) <= budget, (held, budget)


def _child_ledger(answers: Any) -> None:
    ledger = row_groups_held.held_row_groups()
    answers.put((ledger.held_bytes, len(ledger)))


def test_a_forked_worker_starts_with_an_empty_ledger_of_its_own() -> None:
    """The parent's held row groups are not counted (nor kept alive) in a forked worker."""
    import multiprocessing

    ledger = row_groups_held.held_row_groups()
    key = (row_groups_held.new_shard_id(), 0)
    ledger.put(key, {"x": b"held"}, 100)
    try:
        context = multiprocessing.get_context("fork")
        answers = context.SimpleQueue()
        child = context.Process(target=_child_ledger, args=(answers,))
        child.start()
        child.join(30)
        if child.exitcode is None:  # stuck: ended here, so the failure below names it
            child.kill()
            child.join()
        assert child.exitcode == 0
        assert answers.get() == (0, 0)
        assert ledger.get(key) == {"x": b"held"}  # the parent's stays
    finally:
        ledger.drop_shard(key[0])
