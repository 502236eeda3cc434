"""The shards cache: one fetch per machine, LRU within ``limit``, never an open or local shard evicted."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from s3_server import S3Server
from shards_data import id_samples, parquet_bytes, tar_bytes, write_tar_shards
from torch.utils.data import DataLoader

from loaderfactory.shards import (
    CacheError,
    CacheLimitError,
    ShardError,
    ShardInfo,
    ShardsDataset,
    Storage,
    StorageError,
)
from loaderfactory.shards.index.shard_index import build_index
from loaderfactory.shards.storage import signed_get
from loaderfactory.shards.storage import store as storage_module
from loaderfactory.shards.storage.cache import ShardCache

COUNTS = [4, 3, 5, 4, 2, 6]
"""Six uneven shards; ids run on across them."""


def _put_shards(s3: S3Server, prefix: str, counts: list[int] = COUNTS) -> list[str]:
    """Tar shards in the bucket under ``prefix`` (an own prefix per test: the bucket is shared)."""
    storage, urls, first = Storage(s3.storage_options), [], 0
    for number, count in enumerate(counts):
        url = s3.url(f"{prefix}/train-{number:06d}.tar")
        storage.write(url, tar_bytes(id_samples(first, count)))
        urls.append(url)
        first += count
    return urls


def _log_calls(monkeypatch: pytest.MonkeyPatch, name: str, log: Path) -> None:
    """Append ``<pid> <url>`` to ``log`` on every ``ShardCache.<name>`` call, in any forked process."""
    real = getattr(ShardCache, name)

    def logged(self: ShardCache, url: str, *args: object) -> object:
        with open(log, "a") as out:  # one short append per line: atomic between processes
            out.write(f"{os.getpid()} {url}\n")
        return real(self, url, *args)

    monkeypatch.setattr(ShardCache, name, logged)


def _logged(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def _ids(loader: DataLoader[dict[str, object]]) -> Counter[int]:
    return Counter(int(i) for batch in loader for i in batch["cls"])  # type: ignore[attr-defined]


def _cached(cache_dir: Path) -> list[str]:
    """The shards in the cache folder (not its lock files, nor the index kept there)."""
    names = os.listdir(cache_dir)
    return sorted(name for name in names if not name.startswith(".") and not name.startswith("index-"))


def test_two_workers_fetch_each_shard_once(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two worker processes asking for the same shard at the same moment fetch it once, and reuse it."""
    urls = _put_shards(s3, "cache/once", COUNTS[:3])
    fetches, holds = tmp_path / "fetches.log", tmp_path / "holds.log"
    _log_calls(monkeypatch, "_download", fetches)
    _log_calls(monkeypatch, "hold", holds)
    together = multiprocessing.get_context("fork").Barrier(2)
    logged_hold, first_hold = ShardCache.hold, []

    def hold_together(self: ShardCache, url: str) -> object:
        if not first_hold:  # each forked worker's first open of a shard starts with the other's
            first_hold.append(url)
            together.wait(timeout=60)
        return logged_hold(self, url)

    monkeypatch.setattr(ShardCache, "hold", hold_together)
    options = {"storage_options": s3.storage_options, "cache_dir": str(tmp_path / "cache")}
    dataset = ShardsDataset(urls, open_shards=1, **options)  # type: ignore[arg-type]
    loader = DataLoader(dataset, batch_size=2, num_workers=2)  # batches 0 and 1 both in shard 0
    assert _ids(loader) == Counter(range(sum(COUNTS[:3])))
    assert Counter(url for _, url in _logged(fetches)) == Counter(urls)
    readers = {url: {pid for pid, held in _logged(holds) if held == url} for url in urls}
    assert all(len(pids) == 2 for pids in readers.values()), readers  # each shard read by both


def test_lru_eviction_stays_within_limit_and_spares_a_held_shard(s3: S3Server, tmp_path: Path) -> None:
    """With room for 2 shards: the held one survives every fetch, the least recently used goes."""
    urls = _put_shards(s3, "cache/lru", [3, 3, 3, 3, 3])
    storage = Storage(s3.storage_options)
    largest = max(storage.size(url) for url in urls)
    cache = ShardCache(tmp_path / "cache", 2 * largest, storage)
    held = cache.hold(urls[0])
    for url in urls[1:4]:
        cache.local(url)
        assert cache.size() <= cache.limit  # type: ignore[operator]
        assert os.path.exists(held.path)
    assert _cached(tmp_path / "cache") == sorted(cache.path_of(u).name for u in (urls[0], urls[3]))
    held.close()
    cache.local(urls[1])  # now the unheld urls[0] is the least recently used
    cache.local(urls[3])  # a hit: urls[3] becomes the most recently used
    cache.local(urls[4])  # evicts urls[1], not urls[3]
    assert _cached(tmp_path / "cache") == sorted(cache.path_of(u).name for u in (urls[3], urls[4]))
    assert (cache.fetched, cache.hits, cache.evicted) == (6, 1, 4)


def test_local_shards_are_read_in_place_never_copied_or_deleted(s3: S3Server, tmp_path: Path) -> None:
    """Local shards inside the cache folder itself survive evictions forced by remote shards."""
    cache_dir = tmp_path / "cache"
    local = write_tar_shards(cache_dir, [2, 2])
    before = {path: Path(path).read_bytes() for path in local}
    remote = _put_shards(s3, "cache/mixed", [3, 3, 3])
    storage = Storage(s3.storage_options)
    index = build_index(local + remote, storage, progress=False)
    limit = max(info.bytes for info in index if info.url in remote)
    dataset = ShardsDataset(
        local + remote,
        index=index,
        storage_options=s3.storage_options,
        cache_dir=str(cache_dir),
        cache_limit=limit,
        open_shards=1,
    )
    assert Counter(int(dataset[i]["cls"]) for i in range(len(dataset))) == Counter(
        [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    )
    assert {path: Path(path).read_bytes() for path in local} == before
    assert dataset.cache is not None and dataset.cache.evicted == 2
    cached = [name for name in _cached(cache_dir) if not name.startswith("train-")]
    assert cached == [dataset.cache.path_of(remote[2]).name]  # the last remote shard, nothing local
    dataset.close()


@pytest.mark.parametrize("signed", [True, False], ids=["signed GET", "ranges"])
def test_an_interrupted_fetch_leaves_no_partial_file(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signed: bool
) -> None:
    """A fetch failing after its first bytes are written leaves nothing in the cache; the next try
    succeeds. Plain S3 settings fetch by one signed GET; others (here ``verify``) by fsspec ranges."""
    url = _put_shards(s3, "cache/broken", [8])[0]
    options = {**s3.storage_options, **({} if signed else {"client_kwargs": {"verify": False}})}
    calls = Counter[str]()

    def fail_after_writing(*args: Any) -> None:
        calls["signed"] += 1
        args[3].write(b"x" * 1024)  # out: part of the shard, then the connection drops
        raise ConnectionResetError("connection reset")

    real_range = Storage.read_range

    def fail_second_range(self: Storage, target: str, start: int, end: int, *rest: Any) -> bytes:
        calls["ranges"] += 1
        if calls["ranges"] == 2:
            raise StorageError(f"{target}: failed after 0 retries (connection reset)")
        return real_range(self, target, start, end, *rest)

    monkeypatch.setattr(storage_module, "RANGE_BYTES", 1024)
    with monkeypatch.context() as patched:
        patched.setattr(signed_get, "get_into", fail_after_writing)
        patched.setattr(Storage, "read_range", fail_second_range)
        cache = ShardCache(tmp_path / "cache", None, Storage(options, retries=0))
        with pytest.raises(StorageError, match="connection reset"):
            cache.local(url)
    assert calls == Counter({"signed": 1} if signed else {"ranges": 2})
    assert [name for name in os.listdir(tmp_path / "cache") if not name.endswith(".lock")] == []
    assert Path(cache.local(url)).read_bytes() == Storage(s3.storage_options).read(url)


def test_an_unwritable_cache_dir_is_named_before_any_fetch(s3: S3Server, tmp_path: Path) -> None:
    """A cache folder that cannot be created fails when the dataset is built, naming the folder."""
    (tmp_path / "file").write_text("not a folder")
    urls = _put_shards(s3, "cache/unwritable", [2])
    where = tmp_path / "file" / "cache"
    with pytest.raises(CacheError, match=rf"cache.dir '{where}' is not a writable folder .*set cache.dir"):
        ShardsDataset(urls, storage_options=s3.storage_options, cache_dir=str(where))


def test_a_limit_below_one_shard_names_both_sizes_before_any_fetch(s3: S3Server, tmp_path: Path) -> None:
    """``cache_limit`` smaller than the largest remote shard fails at building, naming both sizes."""
    urls = _put_shards(s3, "cache/small", [2, 5])
    size = Storage(s3.storage_options).size(urls[1])
    with pytest.raises(  # a ValueError too
        CacheLimitError,
        match=rf"cache.limit 100 bytes is smaller than the shard {urls[1]} .*\({size} bytes\)",
    ):
        ShardsDataset(
            urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "c"), cache_limit=100
        )
    assert _cached(tmp_path / "c") == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_id_once_in_an_epoch_with_eviction(
    s3: S3Server, tmp_path: Path, num_workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six shards through a cache with room for two (and predownload): each id once, shards evicted."""
    urls = _put_shards(s3, f"cache/epoch{num_workers}")
    fetches = tmp_path / "fetches.log"
    _log_calls(monkeypatch, "_download", fetches)
    largest = max(Storage(s3.storage_options).size(url) for url in urls)
    dataset = ShardsDataset(
        urls,
        storage_options=s3.storage_options,
        cache_dir=str(tmp_path / "cache"),
        cache_limit=2 * largest,
        predownload=4,
        open_shards=1,
    )
    loader = DataLoader(
        dataset,
        batch_size=3,
        shuffle=num_workers > 0,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )
    assert _ids(loader) == Counter(range(sum(COUNTS)))
    evicted = dataset.stats()["cache_evictions"]  # in every process
    dataset.close()
    fetched = Counter(url for _, url in _logged(fetches))
    assert set(fetched) == set(urls)
    cached = dataset.cache.size()  # type: ignore[union-attr]
    if num_workers == 0:  # in order, one shard at a time: each fetched once, all but 2 evicted
        assert fetched == Counter(urls) and dataset.cache.evicted == 4  # type: ignore[union-attr]
        assert cached <= 2 * largest
    else:  # shuffled over two workers: shards come back after eviction. (How far past the limit
        # the cache goes depends on timing: a shard held or being fetched by either worker is never
        # evicted, and each worker fetches on up to THREADS threads.)
        total = sum(Storage(s3.storage_options).size(url) for url in urls)
        assert sum(fetched.values()) > len(urls) and evicted > 0 and cached < total


def test_predownload_fetches_the_next_shards_ahead(s3: S3Server, tmp_path: Path) -> None:
    """Reading sample 0 fetches the shards of the next ``predownload`` samples: stored order, or the
    order told through the reader's ``visit_order``; later reads of them are cache hits."""
    urls = _put_shards(s3, "cache/ahead")
    dataset = ShardsDataset(
        urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "cache"), predownload=8
    )
    cache = dataset.cache
    assert cache is not None
    dataset[0]
    dataset.reader().ahead.predownloader.wait()  # type: ignore[union-attr]
    assert _cached(tmp_path / "cache") == sorted(cache.path_of(u).name for u in urls[:3])  # ids 0..8
    assert cache.fetched == 3
    dataset.reader().visit_order = [9, 23, 12, 0, 1, 2]  # shard 2, then shard 5, then shard 3
    dataset[9]
    dataset.reader().ahead.predownloader.wait()  # type: ignore[union-attr]
    assert (
        cache.fetched == 5
        and os.path.exists(cache.path_of(urls[5]))
        and os.path.exists(cache.path_of(urls[3]))
    )
    assert not os.path.exists(cache.path_of(urls[4]))
    dataset.close()


def test_predownload_always_fetches_the_next_two_shards_the_order_reads(s3: S3Server, tmp_path: Path) -> None:
    """A window that ends inside the shard being read still fetches the next two shards, one a fetch
    thread, so that their fetches run while this one is read: the next in stored order, or the next
    the visit order reaches."""
    urls = _put_shards(s3, "cache/next")
    dataset = ShardsDataset(
        urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "cache"), predownload=1
    )
    cache = dataset.cache
    assert cache is not None
    dataset[0]  # the window (id 1) is in shard 0
    dataset.reader().ahead.predownloader.wait()  # type: ignore[union-attr]
    assert _cached(tmp_path / "cache") == sorted(cache.path_of(u).name for u in urls[:3])
    dataset.reader().visit_order = [12, 13, 14, 15, 20, 21, 8, 0]  # shard 3 whole, then shards 5 and 2
    dataset[12]
    dataset.reader().ahead.predownloader.wait()  # type: ignore[union-attr]
    assert os.path.exists(cache.path_of(urls[5])) and not os.path.exists(cache.path_of(urls[4]))
    assert cache.fetched == 5  # shards 0, 1 and 2, then 3 (read) and 5 (ahead; 2 is there)
    dataset.close()


def test_the_first_shard_is_fetched_beside_the_shards_ahead(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first read does not wait for its shard's whole fetch before fetching ahead: the
    fetch of the next shard has begun while the first one's is still under way."""
    urls = _put_shards(s3, "cache/beside")
    ahead_begun = threading.Event()
    first_saw_ahead: list[bool] = []
    real = ShardCache._download

    def download(self: ShardCache, url: str, *args: Any) -> None:
        if url == urls[1]:
            ahead_begun.set()
        if url == urls[0]:  # before the change, the fetch ahead began only after this one ended
            first_saw_ahead.append(ahead_begun.wait(30))
        real(self, url, *args)

    monkeypatch.setattr(ShardCache, "_download", download)
    dataset = ShardsDataset(
        urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "cache"), predownload=8
    )
    assert int(dataset[0]["cls"]) == 0
    assert first_saw_ahead == [True]
    dataset.close()


def test_predownload_threads_stop_when_the_dataset_is_collected(s3: S3Server, tmp_path: Path) -> None:
    """Without close(), dropping the dataset ends its threads (the leak check would fail otherwise)."""
    urls = _put_shards(s3, "cache/gc", [2, 2, 2])
    dataset = ShardsDataset(
        urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "c"), predownload=4
    )
    dataset[0]
    del dataset
    gc.collect()


def test_a_corrupt_cached_shard_is_named_by_its_url(s3: S3Server, tmp_path: Path) -> None:
    """Format errors of a cached shard name the remote URL first, then the cached copy."""
    url = _put_shards(s3, "cache/corrupt", [3])[0]
    Storage(s3.storage_options).write(url, tar_bytes(id_samples(0, 3))[:1500])
    index = [ShardInfo(url, "tar", 3, 1500)]
    dataset = ShardsDataset(
        [url], storage_options=s3.storage_options, cache_dir=str(tmp_path / "c"), index=index
    )
    with pytest.raises(ShardError, match=rf"{url} \(cached as .*\.train-000000\.tar\): truncated tar"):
        dataset[0]


def test_parquet_shards_read_through_the_cache(s3: S3Server, tmp_path: Path) -> None:
    """Parquet shards are fetched whole and read from the local copy: every id once, one fetch each."""
    storage, urls = Storage(s3.storage_options), [s3.url(f"cache/pq/part-{n}.parquet") for n in range(2)]
    storage.write(urls[0], parquet_bytes(0, 9))
    storage.write(urls[1], parquet_bytes(9, 5))
    dataset = ShardsDataset(urls, storage_options=s3.storage_options, cache_dir=str(tmp_path / "c"))
    assert [dataset[i]["id"] for i in range(len(dataset))] == list(range(14))
    assert dataset.cache is not None and dataset.cache.fetched == 2
    dataset.close()


def test_a_transient_error_during_a_fetch_is_retried_and_counted(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection reset in the middle of a shard's fetch is retried from the byte it reached (the
    shard's bytes come whole and exact); ``dataset.retried`` reports it."""
    urls = _put_shards(s3, "cache/flaky", [3, 2])
    real, starts = signed_get.get_into, []

    def reset_once_halfway(url: str, start: int, end: int, out: Any, *rest: Any) -> None:
        starts.append(start)
        if len(starts) == 1:
            real(url, start, end // 2, out, *rest)
            raise ConnectionResetError("connection reset by peer")
        real(url, start, end, out, *rest)

    index = build_index(urls, Storage(s3.storage_options), progress=False)
    monkeypatch.setattr(signed_get, "get_into", reset_once_halfway)
    dataset = ShardsDataset(
        urls, index=index, storage_options=s3.storage_options, cache_dir=str(tmp_path / "c"), retries=2
    )
    dataset.storage.backoff_s = 0.01
    assert [int(dataset[i]["cls"]) for i in range(len(dataset))] == list(range(5))
    assert dataset.retried == 1 and starts[:2] == [0, index[0].bytes // 2]
    cached = dataset.cache.path_of(urls[0])  # type: ignore[union-attr]
    assert cached.read_bytes() == Storage(s3.storage_options).read(urls[0])
    dataset.close()
