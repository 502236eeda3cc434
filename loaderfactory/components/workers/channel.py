"""A bounded hand-off between one producer thread and one consumer, closeable from either side.

It is the one threading pattern every stage uses: both sides block on a condition (no polling),
the consumer can wait with a deadline, and ``close()`` wakes a producer blocked on a full channel
so it can exit. A :class:`Gate` pauses a producer between items until its consumer lets it run.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
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


class Gate:
    """Lets a gated producer pull items only while someone holds :meth:`allow`; always open otherwise.

    For a training step that releases the GIL in native code: the producer runs while the step
    does and otherwise stays out of the consumer's way. A consumer waiting on an empty channel
    grants one item with :meth:`grant_one`. Blocks on a condition: no sleeping, no polling.
    Counts holders, so nested and concurrent ``allow()`` blocks work.

    Args:
        gated: ``False`` makes every call a no-op, so one code path serves both modes.
    """

    def __init__(self, gated: bool) -> None:
        self.gated = gated
        self._held = 0
        self._credit = False
        self._condition = threading.Condition()

    def grant_one(self) -> None:
        """Let the producer pull one more item (the consumer is waiting for it)."""
        if not self.gated:
            return
        with self._condition:
            self._credit = True
            self._condition.notify_all()

    @contextmanager
    def allow(self) -> Iterator[None]:
        """Let the producer run while this is held."""
        with self._condition:
            self._held += 1
            self._condition.notify_all()
        try:
            yield
        finally:
            with self._condition:
                self._held -= 1

    def wait_open(self, channel: Channel[Any]) -> bool:
        """Wait until the producer may pull an item; ``False`` once ``channel`` is closed."""
        if not self.gated:
            return not channel.closed
        with self._condition:
            while self._held == 0 and not self._credit and not channel.closed:
                self._condition.wait()
            if self._held == 0:
                self._credit = False
        return not channel.closed

    def pace(self, source: Iterator[T], channel: Channel[Any]) -> Iterator[T]:
        """The items of ``source``, each pulled only once the gate is open; ends when ``channel`` closes."""
        while self.wait_open(channel):
            try:
                item = next(source)
            except StopIteration:
                return
            yield item

    def wake(self) -> None:
        """Wake a waiting producer so it sees its channel closed."""
        with self._condition:
            self._condition.notify_all()
