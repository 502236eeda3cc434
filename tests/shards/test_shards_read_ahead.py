"""Local read-ahead: shards read into the OS page cache ahead of their samples, which it never changes."""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shards_data import npy_bytes, tar_bytes

import loaderfactory
from loaderfactory.shards import ShardsDataset, Storage, build_index, index_url, save_index
from loaderfactory.shards.errors import ShardNotFoundError
from loaderfactory.shards.formats.tar.shard import TarShard
from loaderfactory.shards.read import read_ahead as read_ahead_module
from loaderfactory.shards.read.next_shard import NextShard
from loaderfactory.shards.read.read_ahead import PIECE, ReadAhead

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="page cache checks use mincore (Linux)"
)

COUNTS = [24, 24, 24]
ITEM_BYTES = 100_000
"""About 2.4 MB per shard: several read-ahead pieces each."""


def _write_shards(folder: Path, counts: list[int] = COUNTS) -> list[str]:
    """Tar shards of samples ``{cls: id, npy: ITEM_BYTES of the id's low byte}`` and their index,
    flushed to the disk so their pages can be dropped from the page cache."""
    folder.mkdir(parents=True, exist_ok=True)
    urls, first = [], 0
    for number, count in enumerate(counts):
        samples = [
            {
                "__key__": f"s{i:06d}".encode(),
                "cls": str(i).encode(),
                "npy": npy_bytes(np.full(ITEM_BYTES, i % 251, dtype=np.uint8)),
            }
            for i in range(first, first + count)
        ]
        path = folder / f"train-{number:06d}.tar"
        path.write_bytes(tar_bytes(samples))
        urls.append(str(path))
        first += count
    save_index(build_index(urls, Storage(), progress=False), index_url(urls), Storage())
    for url in urls:
        with open(url, "rb") as file:
            os.fsync(file.fileno())
    return urls


def _drop(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as file:
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _cached_pages(path: str) -> float:
    """The share of ``path``'s pages in the page cache, by ``mincore`` on a mapping of it (which,
    unlike a read, starts no read-ahead of its own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)  # never written
        pages = -(-size // mmap.PAGESIZE)
        vector = (ctypes.c_ubyte * pages)()
        view = ctypes.c_char.from_buffer(mapped)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(size), vector):
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            del view
            mapped.close()
    return sum(page & 1 for page in vector) / pages


def _cold(paths: list[str]) -> None:
    """Drop ``paths`` from the page cache, or skip where this file system keeps them (tmpfs)."""
    _drop(paths)
    if max(_cached_pages(path) for path in paths) > 0.5:
        pytest.skip("this file system keeps its files in memory: no cold reads to test")


class Recording(ReadAhead):
    """A read-ahead that records what it would read instead of reading it."""

    def __init__(self, shards: int, worker: tuple[int, int] | None = None) -> None:
        super().__init__(
            [f"shard-{n}" for n in range(shards)], list(range(10, 10 * shards + 1, 10)), print, worker
        )
        self.jobs: list[tuple[int, int]] = []

    def _read(self, shard: int, local: int) -> None:
        self.jobs.append((shard, local))

    def after(self, shard: int, local: int) -> list[tuple[int, int]]:
        self.jobs.clear()
        self.opened(shard, local)
        self.wait()
        return sorted(self.jobs)


def test_in_stored_order_the_shard_opened_and_the_next_are_read_ahead() -> None:
    ahead = Recording(4)
    assert ahead.after(0, 0) == [(0, 0), (1, 0)]
    assert ahead.after(1, 0) == [(1, 0), (2, 0)]
    assert ahead.after(2, 3) == [(2, 3), (3, 0)]  # opened after shard 1 (a resume would land mid-shard)
    assert ahead.after(3, 0) == [(3, 0)]  # the last shard: nothing after it


def test_a_shard_opened_out_of_stored_order_is_read_alone() -> None:
    """A shuffled order opens shards in no stored sequence: only the shard opened is read ahead,
    from the sample asked for (and then its start), never a shard the order may not read next."""
    ahead = Recording(5)
    assert ahead.after(3, 7) == [(3, 7)]
    assert ahead.after(1, 2) == [(1, 2)]
    assert ahead.after(2, 9) == [(2, 9), (3, 0)]  # right after shard 1: stored order again


def test_a_worker_reads_ahead_only_its_share_of_the_shards() -> None:
    odd = Recording(4, worker=(1, 2))
    assert odd.after(0, 0) == [(1, 0)]
    assert odd.after(1, 0) == [(1, 0)]
    even = Recording(4, worker=(0, 2))
    assert even.after(0, 0) == [(0, 0)]
    assert even.after(1, 0) == [(2, 0)]


def test_after_close_nothing_is_read_and_no_thread_runs() -> None:
    ahead = Recording(3)
    ahead.close()
    assert ahead.after(0, 0) == []
    assert ahead._thread is None


@pytest.mark.parametrize("batch", [False, True])
def test_the_next_shard_is_in_the_page_cache_before_its_first_read(tmp_path: Path, batch: bool) -> None:
    """The first read of an epoch in stored order, a sample or a batch (as DataLoader asks)."""
    urls = _write_shards(tmp_path / "data")
    _cold(urls)
    dataset = ShardsDataset(urls)
    samples = dataset.__getitems__([0, 1, 2, 3]) if batch else [dataset[0]]
    assert [int(sample["cls"]) for sample in samples] == list(range(len(samples)))
    assert dataset.reader().ahead.read_ahead is not None
    dataset.reader().ahead.read_ahead.wait()
    assert _cached_pages(urls[0]) == _cached_pages(urls[1]) == 1.0
    assert _cached_pages(urls[2]) < 0.5  # two shards ahead: not yet
    read_ahead = dataset.stats()["bytes_read_ahead"]
    assert 0 < read_ahead <= os.path.getsize(urls[0]) + os.path.getsize(urls[1])  # what it read itself
    dataset.close()


def test_without_read_ahead_only_what_is_read_comes_from_the_disk(tmp_path: Path) -> None:
    urls = _write_shards(tmp_path / "data")
    _cold(urls)
    dataset = ShardsDataset(urls, local_read_ahead=False)
    assert int(dataset[0]["cls"]) == 0
    assert dataset.reader().ahead.read_ahead is None and dataset.stats()["bytes_read_ahead"] == 0
    assert _cached_pages(urls[1]) < 0.5
    dataset.close()


def test_cached_pieces_are_not_read_again(tmp_path: Path) -> None:
    urls = _write_shards(tmp_path / "data")
    for url in urls:
        Path(url).read_bytes()  # now in the page cache
    dataset = ShardsDataset(urls)
    for index in range(len(dataset)):
        dataset[index]
    assert dataset.reader().ahead.read_ahead is not None
    dataset.reader().ahead.read_ahead.wait()
    assert dataset.stats()["bytes_read_ahead"] <= len(urls) * PIECE  # at most a partly cached piece each
    dataset.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_read_ahead_changes_no_sample_through_build_loader(tmp_path: Path, workers: int) -> None:
    """From a cold disk, with read-ahead and without: the same batches in the same order, every
    sample once and intact."""
    urls = _write_shards(tmp_path / "data", [30, 17, 25])
    total = sum([30, 17, 25])
    epochs = {}
    for read_ahead in (True, False):
        _cold(urls)
        config = {
            "dataset": {"kind": "shards", "urls": f"{tmp_path / 'data'}/", "local_read_ahead": read_ahead},
            "loader": {"kind": "torch", "batch_size": 4, "num_workers": workers},
        }
        loader = loaderfactory.build_loader(config)
        batches = [(batch["cls"].tolist(), batch["npy"]) for batch in loader]
        loader.close()
        ids = [i for cls, _ in batches for i in cls]
        assert Counter(ids) == Counter(range(total))
        for cls, data in batches:  # each sample's bytes are its own
            assert data.shape == (len(cls), ITEM_BYTES)
            assert (data == (np.asarray(cls)[:, None] % 251)).all()
        epochs[read_ahead] = ids
    assert epochs[True] == epochs[False]


def test_a_shard_gone_after_indexing_fails_its_read_not_the_read_ahead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    urls = _write_shards(tmp_path / "data")
    dataset = ShardsDataset(urls)
    os.remove(urls[1])
    with caplog.at_level(logging.DEBUG, logger="loaderfactory.shards.read.read_ahead"):
        assert int(dataset[0]["cls"]) == 0
        assert dataset.reader().ahead.read_ahead is not None
        dataset.reader().ahead.read_ahead.wait()
    assert any(urls[1] in record.getMessage() for record in caplog.records)
    with pytest.raises(ShardNotFoundError, match=urls[1]):
        dataset[COUNTS[0]]
    dataset.close()


@pytest.mark.parametrize(
    ("environment", "reads_ahead"),
    [
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, True),  # torchrun on one machine
        ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, False),  # two machines
        ({"SLURM_NNODES": "2"}, False),
        ({"SLURM_NNODES": "1"}, True),
    ],
)
def test_a_job_spanning_machines_reads_nothing_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], reads_ahead: bool
) -> None:
    """Each rank reads every world-size-th sample, so a machine of a multi-machine job reads only a
    part of each shard: reading whole shards ahead there would multiply its reads."""
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NNODES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    dataset = ShardsDataset(_write_shards(tmp_path / "data", [4, 4]))
    dataset[0]
    assert (dataset.reader().ahead.read_ahead is not None) is reads_ahead
    dataset.close()


def test_in_stored_order_the_next_shard_is_opened_ahead_and_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After two shards opened in a row, the next one's headers are walked on a background thread;
    the reads then take that shard instead of walking it again, and every sample is its own."""
    urls = _write_shards(tmp_path / "data", [5, 5, 5, 5])
    walked: list[str] = []
    walk = TarShard.__init__

    def counted(self: TarShard, storage: Any, url: str, *args: Any) -> None:
        walked.append(url)
        walk(self, storage, url, *args)

    monkeypatch.setattr(TarShard, "__init__", counted)
    dataset = ShardsDataset(urls)
    ids = [int(sample["cls"]) for sample in dataset.__getitems__(list(range(20)))]
    assert ids == list(range(20))
    assert sorted(walked) == urls  # each shard walked once: shards 2 and 3 ahead of their reads
    ahead = dataset.reader().ahead
    assert ahead.next_shard is not None and dataset.stats()["shards_opened"] == 4
    dataset.close()
    assert ahead.next_shard is None
    assert not [t for t in threading.enumerate() if t.name == "loaderfactory-next-shard"]


def test_a_shuffled_order_opens_nothing_ahead(tmp_path: Path) -> None:
    urls = _write_shards(tmp_path / "data", [5, 5, 5, 5, 5])
    dataset = ShardsDataset(urls)
    for number in (3, 0, 4, 1):
        dataset[number * 5]
    assert dataset.reader().ahead.next_shard is None
    dataset.close()


def test_a_shard_that_fails_to_open_ahead_fails_its_own_read(tmp_path: Path) -> None:
    """Opened ahead or not, a shard gone since indexing raises ShardNotFoundError naming it when
    its samples are read, and the samples before it are whole."""
    urls = _write_shards(tmp_path / "data", [4, 4, 4])
    dataset = ShardsDataset(urls)
    os.remove(urls[2])
    assert [int(s["cls"]) for s in dataset.__getitems__(list(range(8)))] == list(range(8))
    with pytest.raises(ShardNotFoundError, match=urls[2]):
        dataset[8]
    dataset.close()


def test_next_shard_closes_a_shard_opened_and_never_taken() -> None:
    closed: list[int] = []

    class Opened:
        def __init__(self, number: int) -> None:
            self.number = number

        def close(self) -> None:
            closed.append(self.number)

    ahead = NextShard(Opened)  # type: ignore[arg-type]  # stands in for a shard
    ahead.want(1)
    taken = ahead.take(1)
    assert isinstance(taken, Opened) and taken.number == 1 and ahead.take(1) is None
    ahead.want(2)
    ahead.want(3)  # 2 no longer wanted: closed once opened
    opened = ahead.take(3)
    assert isinstance(opened, Opened) and opened.number == 3
    ahead.want(4)
    ahead.close()  # waits for 4's opening, then closes it
    assert sorted(closed) == [2, 4]
    ahead.want(5)
    assert ahead.take(5) is None  # nothing starts after close


def test_shards_queued_behind_the_one_read_are_asked_of_the_disk_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shuffled read opens many shards at once: those queued behind the shard being read ahead are
    handed to the kernel's read-ahead right away (``posix_fadvise``), each once, not at their turn."""
    paths = []
    for number in range(4):
        path = tmp_path / f"{number}.bin"
        path.write_bytes(bytes(2 * PIECE))
        paths.append(str(path))
    advised: list[str] = []
    monkeypatch.setattr(read_ahead_module, "_advise", advised.append)
    reading, go_on = threading.Event(), threading.Event()
    read = ReadAhead._read

    def held(self: ReadAhead, shard: int, local: int) -> None:
        if shard == 0:
            reading.set()
            assert go_on.wait(30)
        read(self, shard, local)

    monkeypatch.setattr(ReadAhead, "_read", held)
    ahead = ReadAhead(paths, [10, 20, 30, 40], lambda _: None, None)
    ahead.opened(0, 5)
    assert reading.wait(30)
    ahead.opened(2, 3)
    ahead.opened(3, 7)
    go_on.set()
    ahead.wait()
    assert advised == [paths[2], paths[3]]
