"""A lock that a forked child process gets new and released.

A ``threading.Lock`` held by one of the parent's threads when a DataLoader worker forks stays held
in the child forever: the thread that would release it does not exist there. The storage and the
cache of a dataset are copied into forked workers while the parent's background reads (predownload)
may be using them, so their locks are :class:`ForkSafeLock`: every one of them is replaced by a new
lock in the child, right after the fork, before any thread of the child can take it.
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType

_LOCKS: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


class ForkSafeLock:
    """A ``threading.Lock`` used as a context manager, new and released in a forked child."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._lock.__exit__(kind, error, trace)

    def locked(self) -> bool:
        return self._lock.locked()

    def renew(self) -> None:
        """A new, free lock in place of this one (in a forked child, before its threads run)."""
        self._lock = threading.Lock()


def _renew_in_child() -> None:
    for lock in list(_LOCKS):
        lock.renew()


os.register_at_fork(after_in_child=_renew_in_child)
