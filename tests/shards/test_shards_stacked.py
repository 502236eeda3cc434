"""Fixed-size ``.npy`` fields of local tar shards read straight into batch tensors: the same batches
as reading each sample and stacking, one copy fewer, and the usual path wherever a sample differs."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from shards_data import npy_bytes, tar_bytes
from torch.utils.data import default_collate as torch_default_collate

import loaderfactory
from loaderfactory.components.data.stacked import StackedItems, default_collate
from loaderfactory.components.data.tuple_collate import TupleCollate
from loaderfactory.shards import ShardError, ShardsDataset

COUNTS = [7, 5, 9]


def _samples(first: int, count: int, array: Callable[[int], np.ndarray]) -> list[dict[str, bytes]]:
    return [
        {"__key__": f"s{i:05d}".encode(), "x.npy": npy_bytes(array(i)), "cls": str(i).encode()}
        for i in range(first, first + count)
    ]


def _write(folder: Path, array: Callable[[int], np.ndarray], counts: list[int] = COUNTS) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths, first = [], 0
    for number, count in enumerate(counts):
        path = folder / f"part-{number:03d}.tar"
        path.write_bytes(tar_bytes(_samples(first, count, array)))
        paths.append(str(path))
        first += count
    return paths


def _image(i: int) -> np.ndarray:
    return (np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5) + 1000 * i).astype(np.float32)


def _index_lists(total: int) -> list[list[int]]:
    shuffled = list(range(total))
    random.Random(3).shuffle(shuffled)
    return [list(range(total)), list(range(4, 12)), shuffled, [total - 1, -1, 0, 0, 1, 6, 7], [2, 3]]


def _same_samples(batch: list[dict[str, Any]], one_by_one: list[dict[str, Any]]) -> None:
    assert len(batch) == len(one_by_one)
    for got, expected in zip(batch, one_by_one, strict=True):
        assert list(got) == list(expected)  # the same fields, in the same order
        for field, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert got[field].dtype == value.dtype and torch.equal(got[field], value)
            else:
                assert got[field] == value


def test_a_batch_is_read_into_one_tensor_with_every_sample_as_read_alone(tmp_path: Path) -> None:
    dataset = ShardsDataset(_write(tmp_path, _image), open_shards=2)
    for indices in _index_lists(len(dataset)):
        batch = dataset.__getitems__(indices)
        assert isinstance(batch, StackedItems)
        _same_samples(batch, [dataset[i] for i in indices])
        stacked = batch.stacked["x.npy"]
        assert stacked.shape == (len(indices), 2, 3, 5) and stacked.is_contiguous()
        for row, sample in enumerate(batch):  # each sample's array is its row of that tensor
            assert sample["x.npy"].data_ptr() == stacked[row].data_ptr()
        collated = default_collate(batch)
        assert collated["x.npy"] is stacked  # handed over, not copied
        expected = torch_default_collate([dataset[i] for i in indices])
        assert list(collated) == list(expected)
        assert torch.equal(collated["x.npy"], expected["x.npy"]) and torch.equal(
            collated["cls"], expected["cls"]
        )
        assert collated["__key__"] == expected["__key__"] and collated["__url__"] == expected["__url__"]
    dataset.close()


def test_the_collate_hands_a_tensor_over_once_and_only_while_every_row_is_in_place(tmp_path: Path) -> None:
    dataset = ShardsDataset(_write(tmp_path, _image))
    batch = dataset.__getitems__([0, 1, 2, 3])
    stacked = batch.stacked["x.npy"]
    assert default_collate(batch)["x.npy"] is stacked
    again = default_collate(batch)["x.npy"]  # the same list collated twice: the second is a copy
    assert again is not stacked and again.data_ptr() != stacked.data_ptr() and torch.equal(again, stacked)

    replaced = dataset.__getitems__([0, 1, 2, 3])
    replaced[2] = {**replaced[2], "x.npy": replaced[2]["x.npy"] * 0}  # a transform gave a new sample
    collated = default_collate(replaced)
    assert collated["x.npy"].data_ptr() != replaced.stacked.get("x.npy", torch.empty(0)).data_ptr()
    assert torch.equal(collated["x.npy"][2], torch.zeros(2, 3, 5)) and torch.equal(
        collated["x.npy"][3], dataset[3]["x.npy"]
    )
    shortened = dataset.__getitems__([0, 1, 2, 3])
    del shortened[0]
    assert torch.equal(
        default_collate(shortened)["x.npy"], torch.stack([dataset[i]["x.npy"] for i in (1, 2, 3)])
    )
    plain = [dataset[0], dataset[1]]
    assert torch.equal(default_collate(plain)["cls"], torch.tensor([0, 1]))
    dataset.close()


@pytest.mark.parametrize(
    "array",
    [
        pytest.param(
            lambda i: np.full((2, 3), i, np.int32 if i % 4 else np.float32), id="another dtype, same size"
        ),
        pytest.param(
            lambda i: np.full((2, 3) if i % 3 else (3, 2), i, np.int64), id="another shape, same size"
        ),
        pytest.param(lambda i: np.arange(i + 1, dtype=np.int16), id="sizes differ"),
        pytest.param(
            lambda i: np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3) + i), id="Fortran order"
        ),
        pytest.param(lambda i: np.zeros((0, 3), np.float32), id="no elements"),
    ],
)
def test_samples_that_differ_or_do_not_fit_a_row_are_read_as_usual(tmp_path: Path, array: Any) -> None:
    dataset = ShardsDataset(_write(tmp_path, array))
    for indices in _index_lists(len(dataset)):
        batch = dataset.__getitems__(indices)
        _same_samples(batch, [dataset[i] for i in indices])
        if isinstance(batch, StackedItems):  # some batches may fit by chance: then they are exact
            for row, sample in enumerate(batch):
                assert sample["x.npy"].data_ptr() == batch.stacked["x.npy"][row].data_ptr()
    dataset.close()


def test_a_batch_of_another_shape_in_a_later_shard_is_stacked_with_its_own_layout(tmp_path: Path) -> None:
    first = _write(tmp_path / "a", _image, [6])
    second = _write(tmp_path / "b", lambda i: np.full(4, i, np.uint8), [6])
    dataset = ShardsDataset([*first, *second])
    for indices in ([0, 1, 2], [6, 7, 8], [4, 5, 6, 7]):
        batch = dataset.__getitems__(indices)
        _same_samples(batch, [dataset[i] for i in indices])
        assert isinstance(batch, StackedItems) == (indices != [4, 5, 6, 7])
    dataset.close()


def test_without_npy_decoding_the_fields_stay_bytes(tmp_path: Path) -> None:
    dataset = ShardsDataset(_write(tmp_path, _image), decode=["cls"])
    batch = dataset.__getitems__([0, 1, 2])
    assert not isinstance(batch, StackedItems)
    assert isinstance(batch[0]["x.npy"], bytes) and batch[1]["cls"] == 1
    dataset.close()


def test_a_truncated_shard_or_a_missing_key_raises_as_reading_alone_does(tmp_path: Path) -> None:
    (path,) = _write(tmp_path, _image, [6])
    keyed = ShardsDataset([path], keys=["x.npy", "seg.png"])
    with pytest.raises(ShardError, match=r"seg\.png") as caught:
        keyed.__getitems__([0, 1, 2])
    with pytest.raises(ShardError) as alone:
        keyed[0]
    assert str(caught.value) == str(alone.value)
    data = Path(path).read_bytes()
    dataset = ShardsDataset([path])
    assert len(dataset.__getitems__([0, 1, 2, 3, 4, 5])) == 6  # opened while whole
    Path(path).write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardError, match="truncated tar") as caught:
        dataset.__getitems__([2, 3, 4, 5])
    assert path in str(caught.value)
    dataset.close()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_the_loader_delivers_every_sample_once_with_its_own_array(
    tmp_path: Path, workers: int, shuffle: bool
) -> None:
    """Through ``build_loader``: every id once per epoch, each row the array written for that id,
    batches of large arrays from workers in shared memory (no copy into it)."""
    big = lambda i: np.full(50_000, i, np.int32)  # noqa: E731  # 200 KB a sample: over the by-value size
    _write(tmp_path, big, [9, 4, 11])
    config = {
        "dataset": {"kind": "shards", "urls": f"{tmp_path}/"},
        "loader": {"kind": "torch", "batch_size": 4, "num_workers": workers, "shuffle": shuffle, "seed": 5},
    }
    loader = loaderfactory.build_loader(config)
    for _ in range(2):
        seen: Counter[int] = Counter()
        for batch in loader:
            ids = batch["cls"].tolist()
            seen.update(ids)
            assert batch["x.npy"].shape == (len(ids), 50_000)
            assert torch.equal(
                batch["x.npy"], torch.tensor(ids, dtype=torch.int32)[:, None].expand(-1, 50_000)
            )
            assert batch["x.npy"].is_shared() == (workers > 0)
        assert seen == Counter(range(24))
    loader.close()


class CountingShards(ShardsDataset):
    """Counts the batches read by ``__getitems__``."""

    batches = 0

    def __getitems__(self, indices: Any) -> list[dict[str, Any]]:
        type(self).batches += 1
        return super().__getitems__(indices)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_sharded_kind_reads_batches_at_once_and_a_tuple_collate_takes_the_tensors(
    tmp_path: Path, workers: int
) -> None:
    """The ``sharded`` kind reads a step through ``__getitems__``, as torch's fetcher does, and the
    ``tuple`` collate hands the stacked field over as ``default`` does: every id once, exact rows."""
    urls = _write(tmp_path, _image)
    CountingShards.batches = 0
    dataset = CountingShards(urls)
    worker_type = {"worker_type": "process"} if workers else {}
    sharded = {"kind": "sharded", "batch_size": 4, "num_workers": workers, **worker_type}
    with loaderfactory.build_loader({"loader": sharded}, dataset=dataset) as loader:
        batches = list(loader)
    ids = [i for batch in batches for i in batch["cls"].tolist()]
    assert sorted(ids) == list(range(sum(COUNTS)))
    for batch in batches:
        assert torch.equal(
            batch["x.npy"], torch.stack([torch.from_numpy(_image(i)) for i in batch["cls"].tolist()])
        )
    if not workers:
        assert CountingShards.batches == len(batches)
    tuple_collate = {"kind": "torch", "batch_size": 5, "collate": {"kind": "tuple", "keys": ["x.npy", "cls"]}}
    with loaderfactory.build_loader({"loader": tuple_collate}, dataset=ShardsDataset(urls)) as loader:
        pairs = list(loader)
    assert [i for _, cls in pairs for i in cls.tolist()] == list(range(sum(COUNTS)))
    for arrays, cls in pairs:
        assert torch.equal(arrays, torch.stack([torch.from_numpy(_image(i)) for i in cls.tolist()]))
    batch = ShardsDataset(urls).__getitems__([0, 1, 2])
    stacked = batch.stacked["x.npy"]
    assert TupleCollate(["x.npy", "cls"])(batch)[0] is stacked
