"""A bounded hand-off between one producer thread and one consumer, closeable from either side.

It is the one threading pattern every stage uses: both sides block on a condition (no polling),
the consumer can wait with a deadline, and ``close()`` wakes a producer blocked on a full channel
so it can exit.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ChannelClosed(Exception):
    """Raised in the producer by :meth:`Channel.put` once the consumer has closed the channel."""


class Channel(Generic[T]):
    """A FIFO of at most ``capacity`` items between two threads.

    Args:
        capacity: items held before :meth:`put` blocks; at least 1.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        # Who is blocked, so a hand-off only notifies when someone waits (a notify costs a lock probe).
        self._putters_waiting = 0
        self._getters_waiting = 0
        self._closed = False

    def put(self, item: T) -> None:
        """Add ``item``, waiting while the channel is full; raises :class:`ChannelClosed` if closed."""
        with self._not_full:
            while len(self._items) >= self.capacity and not self._closed:
                self._putters_waiting += 1
                try:
                    self._not_full.wait()
                finally:
                    self._putters_waiting -= 1
            if self._closed:
                raise ChannelClosed
            self._items.append(item)
            if self._getters_waiting:
                self._not_empty.notify()

    def get(self, timeout: float | None = None) -> T:
        """Take the oldest item; raises ``TimeoutError`` after ``timeout`` seconds with nothing to take."""
        with self._not_empty:
            if not self._items:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._items:
                    if self._closed:
                        raise ChannelClosed
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError
                    # A huge timeout (``float('inf')`` from YAML's ``.inf``) would overflow the
                    # lock's wait; TIMEOUT_MAX is centuries, and the loop re-checks anyway.
                    self._getters_waiting += 1
                    try:
                        self._not_empty.wait(
                            None if remaining is None else min(remaining, threading.TIMEOUT_MAX)
                        )
                    finally:
                        self._getters_waiting -= 1
            item = self._items.popleft()
            if self._putters_waiting:
                self._not_full.notify()
            return item

    def close(self) -> list[T]:
        """Stop both sides; returns what was still buffered (callers may keep it, e.g. to resume)."""
        with self._lock:
            self._closed = True
            left = list(self._items)
            self._items.clear()
            self._not_full.notify_all()
            self._not_empty.notify_all()
            return left

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def snapshot(self) -> list[Any]:
        """The buffered items, oldest first, without taking them."""
        with self._lock:
            return list(self._items)
