"""The cache's lock files: deleted with their evicted shard, without two processes ever holding a
shard's lock at once."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_http_server import serving
from shards_data import write_tar_shards

from loaderfactory.shards import Storage
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.cache_files import HeldShard, LockFile, evict, lock_path, locked


@pytest.fixture
def http_urls(tmp_path: Path, fsspec_io_thread: None) -> Iterator[list[str]]:
    """Three tar shards of similar size served over HTTP."""
    paths = write_tar_shards(tmp_path / "served", [5, 5, 5])
    with serving(tmp_path / "served") as (base, _):
        yield [f"{base}/{Path(path).name}" for path in paths]


def test_an_evicted_shard_takes_its_lock_file_with_it(http_urls: list[str], tmp_path: Path) -> None:
    """With room for two shards, fetching a third evicts the first and its lock file; the others keep
    theirs."""
    storage = Storage()
    largest = max(storage.size(url) for url in http_urls)
    cache = ShardCache(tmp_path / "cache", 2 * largest, storage)
    for url in http_urls:
        cache.local(url)
    locks = sorted(name for name in os.listdir(cache.dir) if name.endswith(".lock") and name != ".evict.lock")
    kept = [cache.path_of(url).name for url in http_urls[1:]]
    assert cache.evicted == 1 and not cache.path_of(http_urls[0]).exists()
    assert locks == sorted(f".{name}.lock" for name in kept)


def test_a_lock_taken_on_a_deleted_lock_file_is_taken_again_on_the_new_one(tmp_path: Path) -> None:
    """A process waiting on a shard's lock while eviction deletes the lock file ends up holding a lock
    file that is at the path (which a third process would also lock), not the deleted one."""
    lock = tmp_path / ".shard.lock"
    entered = threading.Event()
    inode: list[int] = []

    def waiter() -> None:
        with locked(lock, fcntl.LOCK_EX):
            inode.append(os.stat(lock).st_ino)
            entered.set()

    with locked(lock, fcntl.LOCK_EX):
        old = os.stat(lock).st_ino
        thread = threading.Thread(target=waiter, name="lock-waiter")
        thread.start()
        _wait_until_opened(lock, old)
        lock.unlink()  # what eviction does while it holds the lock
    assert entered.wait(timeout=30)
    thread.join(timeout=30)
    assert lock.exists() and inode == [os.stat(lock).st_ino]


def _wait_until_opened(path: Path, inode: int) -> None:
    """Wait (bounded) until a second descriptor of this process refers to the file ``inode``: the
    waiter opened the lock file and is about to block on it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.stat(f"/proc/self/fd/{fd}").st_ino == inode
            except OSError:
                continue
        if count >= 2:
            return
        time.sleep(0.01)
    raise AssertionError(f"the waiter never opened {path}")


def _lock_after_the_parent(lock: Path, released: Any, results: Any) -> None:
    """In a forked child: once the parent has released ``lock``, whether it can be taken at once."""
    released.wait()
    try:
        with locked(lock, fcntl.LOCK_EX | fcntl.LOCK_NB):
            results.put("taken")
    except BlockingIOError:
        results.put("still held")


def _evict_after_the_parent(path: Path, released: Any, results: Any) -> None:
    """In a forked child: once the parent has closed its hold on the cached ``path``, try evicting it."""
    released.wait()
    results.put("evicted" if evict(path) else "kept")


@pytest.mark.parametrize("kind", ["lock", "hold"])
def test_a_worker_forked_while_a_lock_is_held_does_not_keep_holding_it(tmp_path: Path, kind: str) -> None:
    """A DataLoader worker forked while the parent holds a shard's lock (a predownload fetching it) or
    a shard (open for reading) shares neither: once the parent lets go, the worker takes the lock or
    evicts the shard at once, instead of waiting on its own copy of the parent's lock forever."""
    context = multiprocessing.get_context("fork")
    released, results = context.Event(), context.SimpleQueue()
    shard = tmp_path / "0123456789abcdef.train-000000.tar"
    shard.write_bytes(b"x" * 10)
    if kind == "lock":
        held = contextlib.ExitStack()
        held.enter_context(locked(lock_path(shard), fcntl.LOCK_EX))
        child = context.Process(target=_lock_after_the_parent, args=(lock_path(shard), released, results))
    else:
        held = contextlib.closing(HeldShard(str(shard), _shared_hold(shard)))  # type: ignore[assignment]
        child = context.Process(target=_evict_after_the_parent, args=(shard, released, results))
    with held:
        child.start()
    released.set()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert results.get() == ("taken" if kind == "lock" else "evicted")


def _shared_hold(path: Path) -> LockFile:
    held = LockFile.reading(path)
    held.lock(fcntl.LOCK_SH)
    return held
