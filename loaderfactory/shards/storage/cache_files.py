"""The files of a shards cache folder: ``flock`` locks, holds against eviction, eviction, and the
use marks that order the LRU."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


class HeldShard:
    """A shard's local path, kept from eviction while this is open (a shared lock on the cached file).

    ``close()`` closes the descriptor and never unlocks explicitly: a worker process forked while
    the shard was held shares the lock, and an explicit unlock there would release the parent's.
    """

    def __init__(self, path: str, fd: int | None) -> None:
        self.path, self._fd = path, fd

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def evict(path: Path) -> bool:
    """Delete the cached shard at ``path`` and its lock file unless a process holds or fetches it;
    True when deleted."""
    lock = lock_path(path)
    try:
        with locked(lock, fcntl.LOCK_EX | fcntl.LOCK_NB):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    return False
                path.unlink()
            finally:
                os.close(fd)
            # Safe under the lock: a process that opened the old lock file and waits on it finds it
            # unlinked once it gets the lock, and takes a new one (see locked).
            lock.unlink(missing_ok=True)
            return True
    except (BlockingIOError, FileNotFoundError):
        return False  # being fetched or read, or evicted by another process meanwhile


def touch(path: Path) -> None:
    """Mark ``path`` used now, to the nanosecond: the filesystem's own clock ticks too coarsely (ms)
    to order two uses in a row."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def locked(path: Path, operation: int) -> Iterator[None]:
    """Hold a ``flock`` on the file ``path`` (created if absent); per open file, so threads exclude too.

    Eviction deletes a shard's lock file while holding it: a lock taken on a file no longer at
    ``path`` (the inode differs, or none is there) protects nothing, so it is dropped and taken
    again on the file now there. Raises BlockingIOError for a busy ``LOCK_NB`` lock.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, operation)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)
