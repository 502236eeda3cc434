"""A shuffled batch of local tar samples (:mod:`loaderfactory.shards.read.scatter`): exactly what
``dataset[i]`` gives, each id once an epoch, and shards whose samples differ read as before."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from packed_items import assert_same
from shards_data import id_samples, npy_bytes, tar_bytes, write_tar_shards

import loaderfactory
from loaderfactory.components.data.stacked import StackedItems
from loaderfactory.shards import ShardsDataset, pack
from loaderfactory.shards.formats.tar import stacked as tar_stacked
from loaderfactory.shards.read import scatter as scatter_read
from loaderfactory.shards.read.scatter import read_scattered

COUNTS = [5, 3, 7, 1, 6]


@pytest.fixture(params=["whole", "pieces"])
def cut(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Samples read whole into scratch rows (short ones), or cut into pieces (long ones)."""
    monkeypatch.setattr(scatter_read, "WHOLE", 1 << 30 if request.param == "whole" else 0)
    return str(request.param)


def _shard_of(dataset: ShardsDataset, indices: list[int]) -> list[int]:
    return [dataset.locate(i if i >= 0 else i + len(dataset))[0] for i in indices]


def test_a_shuffled_batch_is_read_scattered_into_stacked_rows(tmp_path: Path, cut: str) -> None:
    dataset = ShardsDataset(write_tar_shards(tmp_path, COUNTS), open_shards=2)
    indices = list(range(len(dataset)))
    random.Random(3).shuffle(indices)
    indices[:2] = [-1, -len(dataset)]  # negative indices count from the end
    read = read_scattered(dataset.reader(), indices, _shard_of(dataset, indices))
    assert isinstance(read, StackedItems)
    assert_same(list(read), [dataset[i] for i in indices], "batch")
    stacked = read.stacked["npy"]
    assert [int(row[0]) for row in stacked] == [i % len(dataset) for i in indices]
    dataset.close()


def test_the_batch_reader_takes_no_per_run_plan_for_a_shuffled_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = ShardsDataset(write_tar_shards(tmp_path, COUNTS))
    indices = list(range(len(dataset)))
    random.Random(5).shuffle(indices)
    monkeypatch.setattr(tar_stacked, "_read_group", lambda *args: pytest.fail("planned run by run"))
    assert_same(list(dataset.__getitems__(indices)), [dataset[i] for i in indices], "batch")


@pytest.mark.parametrize(
    ("fields", "metadata"), [("item", False), ("item", True), ("raw", False)], ids=["item", "metadata", "raw"]
)
def test_packed_items_read_scattered_come_back_as_packed(
    tmp_path: Path, fields: str, metadata: bool, cut: str
) -> None:
    """Shards written by ``pack``, read in a shuffled batch: the packed items (or their stored
    fields on request), as ``dataset[i]`` gives them, over the batch's stacked tensors."""
    items = [{"image": torch.full((2, 3), float(i)), "label": i} for i in range(40)]
    pack(items, str(tmp_path / "packed"), shard_size=4096, progress=False)
    dataset = ShardsDataset(str(tmp_path / "packed"), fields=fields, metadata=metadata, progress=False)
    indices = list(range(len(dataset)))
    random.Random(7).shuffle(indices)
    read = read_scattered(dataset.reader(), indices, _shard_of(dataset, indices))
    assert isinstance(read, StackedItems) and len(set(_shard_of(dataset, indices))) > 1
    assert_same(list(read), [dataset[i] for i in indices], "batch")
    label = "label.cls" if fields == "raw" else "label"
    assert [item[label] for item in read] == indices
    dataset.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_every_id_comes_once_an_epoch_through_a_shuffled_loader(tmp_path: Path, workers: int) -> None:
    write_tar_shards(tmp_path, COUNTS)
    config = {
        "dataset": {"kind": "shards", "urls": f"{tmp_path}/"},
        "loader": {"kind": "torch", "batch_size": 4, "shuffle": True, "num_workers": workers},
        "seed": 2,
    }
    with loaderfactory.build_loader(config) as loader:
        epochs = [[int(i) for batch in loader for i in batch["cls"]] for _ in range(2)]
        for ids in epochs:
            assert sorted(ids) == list(range(sum(COUNTS)))
        assert epochs[0] != epochs[1] != list(range(sum(COUNTS)))
        rows = [int(row[0]) for batch in loader for row in batch["npy"]]
    assert sorted(rows) == list(range(sum(COUNTS)))


def _odd_shard(folder: Path, odd: dict[str, bytes]) -> list[str]:
    """Two shards of 6 samples; sample 2 of the second is ``odd`` instead."""
    folder.mkdir()
    samples = id_samples(6, 6)
    samples[2] = odd
    paths = [folder / "a.tar", folder / "b.tar"]
    paths[0].write_bytes(tar_bytes(id_samples(0, 6)))
    paths[1].write_bytes(tar_bytes(samples))
    return [str(path) for path in paths]


@pytest.mark.parametrize(
    "odd",
    [
        {"__key__": b"sample000008", "cls": b"8", "npy": npy_bytes(np.full(4, 8, dtype=np.int64))},
        {"__key__": b"sample000008", "cls": b"8", "npy": npy_bytes(np.full(3, 8, dtype=np.int32))},
        {"__key__": b"sample000008", "cls": b"8", "npy": npy_bytes(np.full(3, 8, dtype=np.int64))},
        {
            "__key__": b"sample000008",
            "cls": b"8",
            "npy": npy_bytes(np.full(24, 8, dtype=np.uint8)),
            "json": b"{}",
        },
    ],
    ids=["a longer array", "another dtype", "a member fewer", "another header, as long"],
)
def test_a_shard_whose_samples_differ_is_read_as_before(
    tmp_path: Path, odd: dict[str, bytes], cut: str
) -> None:
    dataset = ShardsDataset(_odd_shard(tmp_path / "shards", odd))
    indices = [8, 1, 7, 0, 9, 3]
    assert read_scattered(dataset.reader(), indices, _shard_of(dataset, indices)) is None
    assert_same(list(dataset.__getitems__(indices)), [dataset[i] for i in indices], "batch")
    dataset.close()
