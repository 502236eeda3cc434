"""A storage lock held by one of the parent's threads when a process forks is free in the child."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from loaderfactory.shards import Storage
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.fork_safe import ForkSafeLock


def _take(lock: Any, answer: Any) -> None:
    """Put whether ``lock`` could be taken within half a second (in the child)."""
    plain = lock._lock if isinstance(lock, ForkSafeLock) else lock
    answer.put(plain.acquire(timeout=0.5))


def _child_takes_while_a_parent_thread_holds(lock: Any) -> bool:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_take, args=(lock, answer))
    try:
        child.start()
        taken: bool = answer.get(timeout=60)
        child.join(timeout=60)
        return taken
    finally:
        release.set()
        thread.join()


@pytest.mark.parametrize("owner", ["storage", "cache"])
def test_a_lock_a_parent_thread_holds_at_the_fork_is_free_in_the_child(tmp_path: Path, owner: str) -> None:
    storage = Storage()
    lock = storage._lock if owner == "storage" else ShardCache(str(tmp_path), None, storage)._counts
    assert isinstance(lock, ForkSafeLock)
    assert _child_takes_while_a_parent_thread_holds(lock)
    assert not lock.locked()  # the parent's thread released it there


def test_a_plain_lock_would_stay_held_in_the_child() -> None:
    """What the storage's locks are kept from: the check above can fail."""
    assert not _child_takes_while_a_parent_thread_holds(threading.Lock())
