"""``ShardsDataset``: exact ``len()`` from the index, each sample id once (workers, S3), errors naming URL."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from s3_server import S3Server
from shards_data import id_samples, parquet_bytes, tar_bytes, write_parquet_shards, write_tar_shards
from torch.utils.data import DataLoader

from loaderfactory.shards import (
    ShardError,
    ShardInfo,
    ShardsDataset,
    Storage,
    build_index,
    index_url,
    save_index,
)

TAR_COUNTS = [5, 1, 7, 3]
"""Uneven shards, one with a single sample, so the bisect meets every boundary case."""


def _ids(dataset: ShardsDataset, field: str) -> Counter[int]:
    return Counter(int(dataset[i][field]) for i in range(len(dataset)))


def _ids_through_workers(dataset: ShardsDataset, field: str, num_workers: int) -> Counter[int]:
    loader = DataLoader(
        dataset,
        batch_size=3,
        shuffle=True,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )
    return Counter(int(i) for batch in loader for i in batch[field])


def _indexed(urls: list[str]) -> list[str]:
    storage = Storage()
    save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
    return urls


def test_tar_shards_give_every_id_exactly_once_in_order(tmp_path: Path) -> None:
    """Global sample i is the i-th sample across shards in order; len() is the index's total."""
    dataset = ShardsDataset(_indexed(write_tar_shards(tmp_path, TAR_COUNTS)))
    assert len(dataset) == sum(TAR_COUNTS)
    assert [dataset[i]["cls"] for i in range(len(dataset))] == list(range(sum(TAR_COUNTS)))
    assert dataset[-1]["cls"] == sum(TAR_COUNTS) - 1 and dataset[5]["__url__"].endswith("train-000001.tar")
    with pytest.raises(IndexError, match="sample 16 out of range: the shards hold 16 samples"):
        dataset[16]


def test_len_comes_from_the_index_without_opening_a_shard(tmp_path: Path) -> None:
    """With an index, building the dataset and len() read no shard: here the shards are gone."""
    urls = _indexed(write_tar_shards(tmp_path, TAR_COUNTS))
    for url in urls:
        Path(url).unlink()
    dataset = ShardsDataset(urls)
    assert len(dataset) == sum(TAR_COUNTS)
    with pytest.raises(FileNotFoundError, match=r"no such shard or object .*train-000000\.tar"):
        dataset[0]


def test_without_an_index_the_shards_are_indexed_on_building(tmp_path: Path) -> None:
    """No index file: the dataset reads each shard once to count, then works the same."""
    write_tar_shards(tmp_path, TAR_COUNTS)
    dataset = ShardsDataset(f"{tmp_path}/train-{{000000..000003}}.tar")
    assert _ids(dataset, "cls") == Counter(range(sum(TAR_COUNTS)))


def test_parquet_shards_give_every_id_exactly_once(tmp_path: Path) -> None:
    """Rows across Parquet shards and row groups each come once, by global index."""
    dataset = ShardsDataset(_indexed(write_parquet_shards(tmp_path, [9, 2, 5])))
    assert [dataset[i]["id"] for i in range(len(dataset))] == list(range(16))


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_two_worker_processes_read_every_id_exactly_once(tmp_path: Path, kind: str) -> None:
    """Under torch's DataLoader with 2 workers (the dataset pickled), an epoch has each id once."""
    if kind == "tar":
        dataset, field = ShardsDataset(_indexed(write_tar_shards(tmp_path, TAR_COUNTS))), "cls"
    else:
        dataset, field = ShardsDataset(_indexed(write_parquet_shards(tmp_path, [9, 2, 5]))), "id"
    dataset[0]  # the parent has a shard open; workers must open their own
    assert _ids_through_workers(dataset, field, num_workers=2) == Counter(range(len(dataset)))


def test_only_open_shards_shards_stay_open_and_pickles_carry_none(tmp_path: Path) -> None:
    """The LRU keeps at most ``open_shards``; a pickled copy starts with none and reads the same."""
    dataset = ShardsDataset(_indexed(write_parquet_shards(tmp_path, [2, 2, 2, 2])), open_shards=2)
    reader = dataset.reader()
    for i in range(len(dataset)):
        dataset[i]
        assert 0 < len(reader.opened) <= 2
    copy = pickle.loads(pickle.dumps(dataset))
    assert not copy.reader().opened and copy[5]["id"] == dataset[5]["id"] == 5
    dataset.close()
    assert not reader.opened


def test_a_sample_missing_a_key_names_url_and_sample(tmp_path: Path) -> None:
    """``keys`` every sample must have: one without names the shard, the sample and what it has."""
    samples = id_samples(0, 3)
    del samples[1]["json"]
    path = tmp_path / "holes.tar"
    path.write_bytes(tar_bytes(samples))
    dataset = ShardsDataset([str(path)], keys=("cls", "json"))
    dataset[0]
    message = rf"{path}: sample 'sample000001' \(#1 in the shard, #1 overall\) has no 'json'; "
    message += r"it has \['cls', 'npy'\]"
    with pytest.raises(ShardError, match=message):
        dataset[1]


def test_a_missing_shard_url_is_named(tmp_path: Path) -> None:
    """A shard that does not exist fails when indexing, with its URL."""
    with pytest.raises(FileNotFoundError, match=r"no such shard or object .*absent\.tar"):
        ShardsDataset([str(tmp_path / "absent.tar")])


def test_a_shard_that_changed_since_indexing_is_named(tmp_path: Path) -> None:
    """A shard whose sample count differs from its index entry is refused when opened."""
    urls = _indexed(write_tar_shards(tmp_path, [3, 3]))
    Path(urls[1]).write_bytes(tar_bytes(id_samples(3, 2)))
    dataset = ShardsDataset(urls)
    with pytest.raises(ShardError, match=rf"{urls[1]}: has 2 samples but the index says 3"):
        dataset[4]


def test_s3_tar_and_parquet_shards_through_two_workers(s3: S3Server) -> None:
    """Shards in a real S3 bucket, listed by prefix and indexed there, read each id once by 2 workers."""
    storage = Storage(s3.storage_options)
    first = 0
    for number, count in enumerate(TAR_COUNTS):
        storage.write(s3.url(f"ds/tar/train-{number:06d}.tar"), tar_bytes(id_samples(first, count)))
        first += count
    storage.write(s3.url("ds/pq/part-000000.parquet"), parquet_bytes(0, 9))
    storage.write(s3.url("ds/pq/part-000001.parquet"), parquet_bytes(9, 4))
    for prefix, field, total in [("ds/tar/", "cls", sum(TAR_COUNTS)), ("ds/pq/", "id", 13)]:
        urls = storage.list(s3.url(prefix))
        save_index(build_index(urls, storage, progress=False), index_url(urls), storage)
        dataset = ShardsDataset(s3.url(prefix), storage_options=s3.storage_options)
        assert dataset.urls == urls and len(dataset) == total
        assert dataset[total - 1][field] == total - 1  # the parent reads first, then forks its workers
        assert _ids_through_workers(dataset, field, num_workers=2) == Counter(range(total))


def test_s3_missing_shard_is_named(s3: S3Server) -> None:
    """A shard URL with no object behind it names the URL."""
    with pytest.raises(FileNotFoundError, match=r"no such shard or object .*s3://shards-test/none/x\.tar"):
        ShardsDataset([s3.url("none/x.tar")], storage_options=s3.storage_options)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=8))
def test_locate_maps_every_global_index_to_one_shard_sample(counts: list[int]) -> None:
    """The cumulative-count bisect gives each global index one (shard, sample) pair, each pair once."""
    index = [ShardInfo(f"s-{n}.tar", "tar", count, 0) for n, count in enumerate(counts)]
    dataset = ShardsDataset([info.url for info in index], index=index)  # reads nothing: the index is given
    pairs = [dataset.locate(i) for i in range(len(dataset))]
    assert pairs == [(shard, local) for shard, count in enumerate(counts) for local in range(count)]
    with pytest.raises(IndexError):
        dataset.locate(len(dataset))
