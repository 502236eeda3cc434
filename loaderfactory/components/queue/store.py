"""The in-memory part of :class:`~loaderfactory.components.queue.dataset.QueueDataset`.

``QueueStore`` holds loaded items under a byte budget (and an optional item count), hands samples to
the consumer (the least drawn held items first, see :mod:`~loaderfactory.components.queue.draws`)
and takes new items from the filler. It is a plain thread-safe object:
every wait blocks on one condition with a deadline, nothing polls.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Literal

from loaderfactory.components.queue.draws import LeastDrawn
from loaderfactory.components.queue.entry import Entry
from loaderfactory.errors import LimitError, StallError

Mode = Literal["onsample", "always"]


class StoreClosed(Exception):
    """Raised in the filler by :meth:`QueueStore.put` once the queue is closed."""


def megabytes(nbytes: float) -> str:
    return f"{nbytes / 1e6:.3f} MB"


class QueueStore:
    """Loaded items, oldest first, never more than ``budget`` bytes or ``capacity`` items.

    In mode ``always`` a new item pushes out the oldest items until it fits. In mode ``onsample``
    a put whose item does not fit waits; each draw from a full queue lets the oldest item out,
    and the next draw waits until a new item has taken its place. Either way a draw takes the held
    items drawn least often so far, ties broken at random (``draws``).

    Args:
        budget: bytes the items may hold together.
        capacity: items held at most (``None``: only the budget limits the count).
        mode: ``"onsample"`` or ``"always"``.
        draws: picks the items of each draw and counts them.
        owner: the component a :class:`LimitError` names (held weakly: the store never keeps it alive).
    """

    def __init__(
        self, budget: int, capacity: int | None, mode: Mode, draws: LeastDrawn, owner: object = None
    ) -> None:
        self._owner = None if owner is None else weakref.ref(owner)
        self.budget = budget
        self.capacity = capacity
        self.mode = mode
        self.draws = draws
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self._failure: BaseException | None = None
        self._blocked = 0
        """Puts waiting for room with a loaded item (mode ``onsample``)."""
        self._owed = 0
        """Items let out by draws and not yet replaced (mode ``onsample``)."""
        self.full_once = False
        self.peak_bytes = 0
        self.loads = 0
        self.evictions = 0

    # -- filler -------------------------------------------------------------------------------
    def put(self, entry: Entry) -> None:
        """Add a loaded item; waits for room in mode ``onsample``. Raises :class:`StoreClosed`."""
        if entry.nbytes > self.budget:
            raise LimitError(
                "ram_budget",
                f"item {entry.index} takes {megabytes(entry.nbytes)}, more than the whole budget of "
                f"{megabytes(self.budget)}; raise ram_budget or make items smaller",
                component=None if self._owner is None else self._owner(),
            )
        with self._cond:
            if self.mode == "always":
                while self._entries and not self._fits(entry.nbytes):
                    self.full_once = True
                    self._evict()
            else:
                while not self._closed and not self._fits(entry.nbytes):
                    # Full by bytes: what the last draw let out was not enough room, so that draw's
                    # debt is void and the next draw may go on (and let out one more).
                    self.full_once = True
                    self._owed = 0
                    self._blocked += 1
                    self._cond.notify_all()  # a draw waiting for a full queue may go on now
                    try:
                        self._cond.wait()
                    finally:
                        self._blocked -= 1
            if self._closed:
                raise StoreClosed
            entry.born = time.monotonic()
            self._entries.append(entry)
            self.draws.add(entry)
            self._bytes += entry.nbytes
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            self.loads += 1
            self._owed = max(0, self._owed - 1)
            if self.capacity is not None and len(self._entries) >= self.capacity:
                self.full_once = True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Record the filler's or a worker's failure; the next draw raises it. The first failure wins."""
        with self._cond:
            if self._failure is None and not self._closed:
                self._failure = error
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter; the filler gets :class:`StoreClosed`, items are dropped."""
        with self._cond:
            self._closed = True
            self._entries.clear()
            self.draws.clear()
            self._bytes = 0
            self._cond.notify_all()

    # -- consumer -----------------------------------------------------------------------------
    def sample(self, k: int, timeout: float | None, name: str) -> tuple[list[Entry], int, int]:
        """Draw ``k`` entries, the least drawn first; returns them, the item count and the bytes held.

        Draws without replacement when the queue holds at least ``k`` items. In mode ``onsample``
        a draw from a full queue lets the oldest item out afterwards.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._raise_if_failed()
                if self._closed:
                    raise RuntimeError(f"{name}: the queue was closed while drawing")
                if self._ready(k):
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise StallError(
                        f"{name}: no batch for {timeout} s (timeout): the queue holds {len(self._entries)} "
                        "items and its workers have not delivered; they are stuck or too slow"
                    )
                self._cond.wait(remaining)
            size = len(self._entries)
            # Without replacement while the queue holds a whole batch (a queue smaller than a batch
            # only happens with wait_fill below batch_size, or a budget of fewer items).
            drawn = self.draws.take(k, size)
            held, held_bytes = size, self._bytes
            if self.mode == "onsample" and self._full_now():
                self._evict()
                self._owed += 1
                self._cond.notify_all()
            return drawn, held, held_bytes

    def recount(self) -> None:
        """Key the held items afresh after the draw counts were restored."""
        with self._cond:
            self.draws.rekey(list(self._entries))

    def wait_for(self, count: int | None, timeout: float | None) -> bool:
        """Wait until the queue holds ``count`` items (``None``: until it is full); ``False`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._raise_if_failed()
                if self._closed:
                    return False
                # A queue that filled up before reaching ``count`` items cannot grow further.
                if self.full_once or (count is not None and len(self._entries) >= count):
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    # -- internals (hold the lock) --------------------------------------------------------------
    def _fits(self, nbytes: int) -> bool:
        room_for_one = self.capacity is None or len(self._entries) < self.capacity
        return room_for_one and self._bytes + nbytes <= self.budget

    def _full_now(self) -> bool:
        at_capacity = self.capacity is not None and len(self._entries) >= self.capacity
        return at_capacity or self._blocked > 0

    def _ready(self, k: int) -> bool:
        if not self._entries:
            return False
        if self.mode == "onsample" and self.full_once:
            # Steady state: wait until the item let out by the last draw is replaced and the queue
            # is full again, so each draw sees the same queue whatever the timing (one worker).
            return self._owed == 0 and self._full_now()
        return True

    def _evict(self) -> None:
        oldest = self._entries.popleft()
        self.draws.remove(oldest)
        self._bytes -= oldest.nbytes
        self.evictions += 1

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure
