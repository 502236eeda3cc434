"""Remote shards with no index beside them: the index built at start is kept in ``cache.dir``."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server
from shards_data import id_samples, tar_bytes, write_tar_shards

import loaderfactory
from loaderfactory.errors import ConfigError
from loaderfactory.shards import ShardChangedError, ShardError, ShardsDataset, Storage
from loaderfactory.shards.index import found_shards
from loaderfactory.shards.index.cached import cached_index_path


def _put(s3: S3Server, prefix: str, counts: Sequence[int], first_number: int = 0, first_id: int = 0) -> None:
    """Tar shards ``train-<n>.tar`` under ``prefix`` (a prefix of the test's own: the bucket is shared)."""
    storage = Storage(s3.storage_options)
    for number, count in enumerate(counts, first_number):
        storage.write(s3.url(f"{prefix}/train-{number:06d}.tar"), tar_bytes(id_samples(first_id, count)))
        first_id += count


@pytest.fixture
def indexed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs of every shard indexed by reading it, as building a dataset indexes them."""
    urls: list[str] = []
    real = found_shards.build_index

    def recording(shards: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        urls.extend(shards)
        return real(shards, *args, **kwargs)

    monkeypatch.setattr(found_shards, "build_index", recording)
    return urls


def _epoch_ids(s3: S3Server, prefix: str, cache_dir: Path) -> tuple[list[int], str]:
    """Every ``cls`` of one epoch through ``build_loader`` with two workers, and the index's source."""
    config = {
        "dataset": {
            "kind": "shards",
            "urls": s3.url(f"{prefix}/"),
            "storage_options": s3.storage_options,
            "cache": {"dir": str(cache_dir)},
        },
        "loader": {"kind": "torch", "batch_size": 3, "num_workers": 2},
        "run": {"progress": False},
    }
    with loaderfactory.build_loader(config) as loader:
        ids = [int(i) for batch in loader for i in batch["cls"]]
        source = loader.dataset.index_source
    return ids, source


def test_the_index_built_at_the_first_start_is_read_at_the_next(
    s3: S3Server, tmp_path: Path, indexed: list[str]
) -> None:
    _put(s3, "index-cache/kept", [4, 3, 5])
    cache_dir = tmp_path / "cache"
    ids, source = _epoch_ids(s3, "index-cache/kept", cache_dir)
    assert Counter(ids) == Counter(range(12)) and source == "built"
    assert len(indexed) == 3
    saved = cached_index_path(cache_dir, [s3.url(f"index-cache/kept/train-{n:06d}.tar") for n in range(3)])
    assert saved.is_file()

    indexed.clear()
    ids, source = _epoch_ids(s3, "index-cache/kept", cache_dir)
    assert Counter(ids) == Counter(range(12))
    assert indexed == [] and source == str(saved)  # no shard read to count its samples


def test_shards_added_since_are_indexed_alone(s3: S3Server, tmp_path: Path, indexed: list[str]) -> None:
    _put(s3, "index-cache/grows", [4, 3])
    cache_dir = tmp_path / "cache"
    assert Counter(_epoch_ids(s3, "index-cache/grows", cache_dir)[0]) == Counter(range(7))
    _put(s3, "index-cache/grows", [2, 6], first_number=2, first_id=7)
    indexed.clear()
    ids, _ = _epoch_ids(s3, "index-cache/grows", cache_dir)
    assert Counter(ids) == Counter(range(15))
    assert indexed == [s3.url(f"index-cache/grows/train-{n:06d}.tar") for n in (2, 3)]
    indexed.clear()
    assert Counter(_epoch_ids(s3, "index-cache/grows", cache_dir)[0]) == Counter(range(15))
    assert indexed == []


def test_a_shard_rewritten_is_forgotten_by_the_cached_index_and_indexed_at_the_next_start(
    s3: S3Server, tmp_path: Path
) -> None:
    _put(s3, "index-cache/rewritten", [4, 3])
    cache_dir = tmp_path / "cache"
    _epoch_ids(s3, "index-cache/rewritten", cache_dir)
    _put(s3, "index-cache/rewritten", [5])  # shard 0: 5 samples where the cached index says 4
    assert len(list(cache_dir.glob("*.train-000000.tar"))) == 1  # the copy of the old version
    dataset = ShardsDataset(
        s3.url("index-cache/rewritten/"), storage_options=s3.storage_options, cache_dir=str(cache_dir)
    )
    assert len(dataset) == 7  # the saved counts
    changed = r"holds \d+ bytes \(etag:\w+\) where the index says \d+ \(etag:\w+\); the shard changed"
    forgot = rf"the cached index {dataset.index_source} forgot it: run again to index it anew"
    with pytest.raises(ShardError, match=rf"{changed} since it was indexed, .*\): {forgot}"):
        dataset[0]
    dataset.close()
    ids, source = _epoch_ids(s3, "index-cache/rewritten", cache_dir)  # shard 0 indexed again: 5 + 3
    assert source == "built" and Counter(ids) == Counter([*range(5), *range(4, 7)])


def test_a_shard_replaced_while_another_is_added_is_refused_not_served_from_its_old_copy(
    s3: S3Server, tmp_path: Path
) -> None:
    """The index is built again in part (a shard added): the entries read from the saved file are
    still checked against the store before their cached copies are reused."""
    prefix, cache_dir = "index-cache/replaced-and-grown", tmp_path / "cache"
    _put(s3, prefix, [4, 3])
    assert Counter(_epoch_ids(s3, prefix, cache_dir)[0]) == Counter(range(7))
    _put(s3, prefix, [5], first_id=100)  # shard 0 replaced: ids 100..104, another size and ETag
    _put(s3, prefix, [2], first_number=2, first_id=200)  # and a shard added
    changed = r"the shard changed since it was indexed.*: the cached index \S+ forgot it"
    with pytest.raises(ShardChangedError, match=changed):
        _epoch_ids(s3, prefix, cache_dir)
    ids, _ = _epoch_ids(s3, prefix, cache_dir)  # shard 0 indexed anew
    assert Counter(ids) == Counter([*range(100, 105), *range(4, 7), 200, 201])


def test_a_damaged_cached_index_is_built_again(
    s3: S3Server, tmp_path: Path, indexed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    _put(s3, "index-cache/damaged", [2, 2])
    cache_dir = tmp_path / "cache"
    _epoch_ids(s3, "index-cache/damaged", cache_dir)
    saved = next(cache_dir.glob("index-*.json"))
    saved.write_text("{not json")
    indexed.clear()
    with caplog.at_level(logging.WARNING, logger="loaderfactory.shards.index.cached"):
        ids, source = _epoch_ids(s3, "index-cache/damaged", cache_dir)
    assert Counter(ids) == Counter(range(4)) and source == "built" and len(indexed) == 2
    assert any("ignoring the cached index" in record.getMessage() for record in caplog.records)
    assert _epoch_ids(s3, "index-cache/damaged", cache_dir)[1] == str(saved)


def test_local_shards_keep_no_index_in_the_cache(tmp_path: Path) -> None:
    """Indexing local shards reads only their headers from the disk: nothing is saved for them."""
    write_tar_shards(tmp_path / "data", [3, 2])
    cache_dir = tmp_path / "cache"
    dataset = ShardsDataset(f"{tmp_path / 'data'}/", cache_dir=str(cache_dir))
    assert dataset.index_source == "built" and len(dataset) == 5
    assert not list(cache_dir.glob("index-*.json"))
    dataset.close()


def test_an_unwritable_cache_is_named_before_any_indexing(s3: S3Server, tmp_path: Path) -> None:
    _put(s3, "index-cache/unwritable", [2])
    blocked = tmp_path / "file"
    blocked.write_text("")
    config = {
        "dataset": {
            "kind": "shards",
            "urls": s3.url("index-cache/unwritable/"),
            "storage_options": s3.storage_options,
            "cache": {"dir": str(blocked / "cache")},
        },
        "run": {"progress": False},
    }
    with pytest.raises(ConfigError, match=r"dataset\.cache\.dir"):
        loaderfactory.build_loader(config)
