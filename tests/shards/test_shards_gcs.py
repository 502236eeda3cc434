"""Shards over ``gs://``, against a GCS emulator (gcp-storage-emulator) through gcsfs: read with workers
and the cache, each sample id once, and ``pack`` writing there."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from gcs_server import GcsServer
from shards_data import id_samples, tar_bytes

import loaderfactory
from loaderfactory.shards import INDEX_NAME, ShardsDataset, Storage

COUNTS = [5, 3, 6, 4]


def test_gs_storage_lists_sizes_reads_ranges_and_names_a_missing_object(
    gcs: GcsServer, fsspec_io_thread: None
) -> None:
    """The storage operations the shards need, on ``gs://``; a missing object is FileNotFoundError."""
    storage = Storage(gcs.storage_options, retries=0)
    storage.write(gcs.url("storage/b/two.bin"), b"0123456789")
    storage.write(gcs.url("storage/a.bin"), b"abc")
    assert storage.list(gcs.url("storage/")) == [gcs.url("storage/a.bin"), gcs.url("storage/b/two.bin")]
    assert storage.size(gcs.url("storage/b/two.bin")) == 10
    assert storage.read_range(gcs.url("storage/b/two.bin"), 3, 7) == b"3456"
    with pytest.raises(FileNotFoundError, match=r"no such shard or object .*gs://shards-test/storage/x\.tar"):
        storage.read(gcs.url("storage/x.tar"))


@pytest.mark.parametrize("cached", [False, True])
def test_gs_tar_shards_through_two_workers_give_every_id_once(
    gcs: GcsServer, fsspec_io_thread: None, tmp_path: Path, cached: bool
) -> None:
    """Tar shards under a ``gs://`` prefix, indexed on building and read shuffled by two worker
    processes (by ranges, or fetched into ``cache.dir``): each sample id exactly once."""
    storage, first, prefix = Storage(gcs.storage_options), 0, gcs.url(f"read/{cached}/")
    for number, count in enumerate(COUNTS):
        storage.write(f"{prefix}train-{number:06d}.tar", tar_bytes(id_samples(first, count)))
        first += count
    dataset = {"kind": "shards", "urls": prefix, "storage_options": gcs.storage_options, "shuffle_window": 2}
    if cached:
        dataset["cache"] = {"dir": str(tmp_path / "cache")}
    loader = {"kind": "torch", "batch_size": 3, "shuffle": True, "num_workers": 2}
    with loaderfactory.build_loader({"dataset": dataset, "loader": loader, "seed": 5}) as run:
        ids = [int(i) for batch in run for i in batch["cls"]]
    assert Counter(ids) == Counter(range(sum(COUNTS))) and ids != sorted(ids)


def test_pack_writes_shards_and_index_to_gs(gcs: GcsServer, fsspec_io_thread: None) -> None:
    """``pack`` to a ``gs://`` prefix writes several shards and their index; they read back, each id once."""
    items = [{"id": i, "text": f"item {i}"} for i in range(40)]
    out = gcs.url("packed/")
    result = loaderfactory.pack(
        items, out, shard_size=2048, storage_options=gcs.storage_options, progress=False
    )
    assert result.index == f"{out}{INDEX_NAME}" and len(result.shards) > 1
    dataset = ShardsDataset(out, storage_options=gcs.storage_options)
    assert Counter(dataset[i]["id"] for i in range(len(dataset))) == Counter(range(40))
    dataset.close()
