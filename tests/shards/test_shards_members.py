"""The member table ``pack`` keeps beside each local tar shard
(:mod:`loaderfactory.shards.formats.tar.members`): what a scan finds, used to open the shard, and
never used where it no longer describes the shard."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from packed_items import assert_same, expected_item

import loaderfactory
from loaderfactory.shards import ShardsDataset, Storage, pack
from loaderfactory.shards.formats.tar import shard as tar_format
from loaderfactory.shards.formats.tar.members import kept_members, members_url
from loaderfactory.shards.formats.tar.shard import scan_tar

COUNT = 60


def _items() -> list[dict[str, Any]]:
    return [
        {"image": np.full((3, 5), i, np.uint8), "label": i, "name": f"item {i}", "blob": bytes(i % 7)}
        for i in range(COUNT)
    ]


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    folder = tmp_path / "packed"
    pack(_items(), str(folder), shard_size=2048, progress=False)
    return folder


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.tar"))


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs scanned for their headers, as shards open."""
    scanned: list[str] = []

    def counted(storage: Storage, url: str) -> Any:
        scanned.append(url)
        return scan_tar(storage, url)

    monkeypatch.setattr(tar_format, "scan_tar", counted)
    return scanned


def _read_all(folder: Path) -> list[Any]:
    dataset = ShardsDataset(str(folder), progress=False)
    try:
        return [dataset[i] for i in range(len(dataset))]
    finally:
        dataset.close()


def test_pack_keeps_what_a_scan_finds_beside_each_tar_shard(packed: Path) -> None:
    shards = _shards(packed)
    assert len(shards) > 3
    for shard in shards:
        kept, scanned = kept_members(str(shard)), scan_tar(Storage(), str(shard))
        assert kept is not None
        assert (kept.keys, kept.bounds, kept.fields) == (scanned.keys, scanned.bounds, scanned.fields)
        assert (kept.offsets, kept.sizes) == (scanned.offsets, scanned.sizes)


def test_packed_shards_open_without_a_scan_and_read_back_every_item(packed: Path, scans: list[str]) -> None:
    for got, item in zip(_read_all(packed), _items(), strict=True):
        assert_same(got, expected_item(item))
    assert scans == []


def test_parquet_shards_and_remote_folders_get_no_table(tmp_path: Path) -> None:
    pack(_items(), str(tmp_path / "parquet"), format="parquet", shard_size=4096, progress=False)
    assert not list((tmp_path / "parquet").glob("*.npz"))
    assert kept_members("s3://bucket/shard-000000.tar") is None


def test_a_shard_written_again_after_its_table_is_scanned(packed: Path, scans: list[str]) -> None:
    """A shard written again with other labels (the same keys, members and size: a table that
    described it would cut the labels' digits wrongly) is newer than its table: it is scanned."""
    other = packed.parent / "other"
    pack(
        [{**item, "label": 1000 + item["label"]} for item in _items()],
        str(other),
        shard_size=2048,
        progress=False,
    )
    shard = _shards(packed)[1]
    shutil.copyfile(_shards(other)[1], shard)
    assert shard.stat().st_size == _shards(other)[1].stat().st_size
    os.utime(members_url(str(shard)), ns=(1, 1))  # older than the shard, whatever the clock's grain
    dataset = ShardsDataset(str(packed), progress=False)
    labels = [item["label"] for item in _read_all(packed)]
    low, high = dataset.ends[0], dataset.ends[1]
    dataset.close()
    assert labels == [label + 1000 if low <= label < high else label for label in range(COUNT)]
    assert scans == [str(shard)]


def _save(url: str, arrays: dict[str, np.ndarray]) -> None:
    with open(members_url(url), "wb") as file:
        np.savez(file, **arrays)


def test_a_table_that_does_not_describe_its_shard_is_not_used(packed: Path, scans: list[str]) -> None:
    """Another shard's table, newer than this shard and said to be for its size, names other keys:
    scanned."""
    first, second = _shards(packed)[:2]
    with np.load(members_url(str(second))) as kept:
        arrays = dict(kept)
    arrays["shard_bytes"] = np.int64(first.stat().st_size)
    _save(str(first), arrays)
    assert kept_members(str(first)) is None
    for got, item in zip(_read_all(packed), _items(), strict=True):
        assert_same(got, expected_item(item))
    assert scans == [str(first)]


@pytest.mark.parametrize(
    "content", [b"", b"not a table", b"PK\x03\x04 cut short"], ids=["empty", "junk", "cut"]
)
def test_a_table_that_does_not_load_is_not_used(packed: Path, scans: list[str], content: bytes) -> None:
    shard = _shards(packed)[0]
    Path(members_url(str(shard))).write_bytes(content)
    assert kept_members(str(shard)) is None
    assert [item["label"] for item in _read_all(packed)] == list(range(COUNT))
    assert scans == [str(shard)]


def test_a_table_with_other_sizes_is_not_used(packed: Path) -> None:
    """A table whose last member's size is not its header's (edited, or from another writer)."""
    shard = _shards(packed)[0]
    with np.load(members_url(str(shard))) as kept:
        arrays = dict(kept)
    arrays["sizes"] = arrays["sizes"].copy()
    arrays["sizes"][-1] += 1
    _save(str(shard), arrays)
    assert kept_members(str(shard)) is None


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shuffled_epoch_over_kept_tables_gives_every_id_once(
    packed: Path, scans: list[str], workers: int
) -> None:
    config = {
        "dataset": {"kind": "shards", "urls": str(packed)},
        "loader": {"kind": "torch", "batch_size": 8, "shuffle": True, "num_workers": workers},
        "seed": 3,
    }
    with loaderfactory.build_loader(config) as loader:
        batches = list(loader)
    labels = torch.cat([batch["label"] for batch in batches]).tolist()
    assert sorted(labels) == list(range(COUNT)) and labels != list(range(COUNT))
    for batch in batches:  # every batch intact: each image holds its own label
        assert torch.equal(batch["image"][:, 0, 0].long(), batch["label"])
    if workers == 0:
        assert scans == []
