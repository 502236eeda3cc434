"""The files of a shards cache folder: ``flock`` locks, holds against eviction, eviction, and the
use marks that order the LRU."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

_GUARD = threading.RLock()
"""Held while a :class:`LockFile` opens or closes, and across a fork: the child's set is exact.
Re-entrant: a collection inside an open may close a dropped :class:`HeldShard` on the same thread."""
_OPEN: set[LockFile] = set()


class LockFile:
    """An open file that this process locks with ``flock``, closed in a forked child.

    A ``flock`` belongs to the open file, which a forked child shares with its parent. A lock one of
    the parent's threads holds while a DataLoader worker forks (a predownload fetching a shard)
    would stay held as long as the worker lives, since no thread there closes the copy, and the
    worker, taking the same lock anew, would wait on itself forever. So every descriptor of this
    kind is closed in the child right after the fork (``fd`` reads None there); the lock stays the
    parent's, released when the parent closes its own. ``close()`` never unlocks explicitly: that
    would release a lock another process shares.
    """

    __slots__ = ("fd",)

    def __init__(self, path: str | Path) -> None:
        with _GUARD:
            self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            _OPEN.add(self)

    @classmethod
    def reading(cls, path: str | Path) -> LockFile:
        """An existing file opened read-only (a cached shard); FileNotFoundError if absent."""
        self = cls.__new__(cls)
        with _GUARD:
            self.fd = os.open(path, os.O_RDONLY)
            _OPEN.add(self)
        return self

    def lock(self, operation: int) -> None:
        assert self.fd is not None
        fcntl.flock(self.fd, operation)

    def same_file(self, path: str | Path) -> bool:
        """Whether ``path`` names the file this descriptor has open (not deleted or replaced)."""
        assert self.fd is not None
        try:
            return os.stat(path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def close(self) -> None:
        with _GUARD:
            fd, self.fd = self.fd, None
            _OPEN.discard(self)
            if fd is not None:
                os.close(fd)


def _before_fork() -> None:
    _GUARD.acquire()


def _after_fork_in_parent() -> None:
    _GUARD.release()


def _after_fork_in_child() -> None:
    """The child's copies of the parent's lock descriptors closed: their locks are the parent's."""
    for lock_file in list(_OPEN):
        fd, lock_file.fd = lock_file.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _OPEN.clear()
    _GUARD.release()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


class HeldShard:
    """A shard's local path, kept from eviction while this is open (a shared lock on the cached file,
    which a forked worker does not share: see :class:`LockFile`)."""

    def __init__(self, path: str, held: LockFile | None) -> None:
        self.path, self._held = path, held

    def close(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def __del__(self) -> None:
        self.close()


def evict(path: Path) -> bool:
    """Delete the cached shard at ``path`` and its lock file unless a process holds or fetches it;
    True when deleted."""
    lock = lock_path(path)
    try:
        with locked(lock, fcntl.LOCK_EX | fcntl.LOCK_NB):
            shard = LockFile.reading(path)
            try:
                shard.lock(fcntl.LOCK_EX | fcntl.LOCK_NB)
                if not shard.same_file(path):
                    return False
                path.unlink()
            finally:
                shard.close()
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
    again on the file now there. Raises BlockingIOError for a busy ``LOCK_NB`` lock. A worker forked
    meanwhile does not share the lock (:class:`LockFile`).
    """
    while True:
        lock_file = LockFile(path)
        try:
            lock_file.lock(operation)
            if lock_file.same_file(path):
                break
        except BaseException:
            lock_file.close()
            raise
        lock_file.close()
    try:
        yield
    finally:
        lock_file.close()
