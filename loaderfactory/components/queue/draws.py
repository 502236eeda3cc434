"""Which held items a :class:`~loaderfactory.components.queue.store.QueueStore` draws: the least
drawn so far, ties broken at random.

Drawing uniformly among the held items leaves the draws per item as uneven as i.i.d. sampling or
worse: over 800 draws from 64 items (mode ``always``, 2 workers, capacity 32, one load per two to
four draws) the counts' coefficient of variation was 0.26–0.34 and the most drawn item came up 4–7
times as often as the least drawn; drawing the least drawn held item first gives 0.04–0.10 and
1.3 (``benchmarks/bench_queue_balance.py``). It levels the counts of the items held, and an item
that comes back into the queue catches up with the others. What it cannot level is an item that
was rarely held: in mode ``always`` with draws ten times faster than loads, the items loaded last
stay behind.
"""

from __future__ import annotations

import heapq
import itertools
import random
from typing import Any

import numpy as np

from loaderfactory.components.queue.entry import Entry

Box = list[Entry | None]
"""The one-element holder of an entry in the heap: emptied when the entry leaves the store, so an
evicted item's memory is freed at once even though its heap node is dropped lazily."""
Node = tuple[int, float, int, Box]
"""``(draws, tie break, sequence number, box)``; the unique sequence number keeps boxes uncompared."""


class LeastDrawn:
    """Hands out the held entries whose dataset index has been drawn least often, ties at random.

    Keeps a heap of the held entries keyed by their index's draw count and a random tie break, so
    a draw costs O(k log n) for ``k`` of ``n`` held items. Not thread-safe: the store calls it under
    its lock.

    Args:
        counts: draws so far per dataset index, updated here at every draw. Shared with the
            telemetry, and kept across the queue's runs, so an item reloaded later (or after
            ``load_state_dict``) enters at its count and catches up with the others.
        seed: seeds the tie breaks.
    """

    def __init__(self, counts: np.ndarray[Any, np.dtype[np.int64]], seed: int) -> None:
        self.counts = counts
        self._rng = random.Random(seed)
        self._heap: list[Node] = []
        self._boxes: dict[int, Box] = {}
        """``id(entry)`` → the box of its live heap node."""
        self._numbers = itertools.count()
        self._stale = 0
        """Entries in the heap that have left the store, skipped when they surface."""

    def add(self, entry: Entry) -> None:
        """An entry came into the store."""
        entry.held = True
        self._push(entry)

    def remove(self, entry: Entry) -> None:
        """An entry left the store: its box is emptied now (freeing the item), its node later."""
        entry.held = False
        box = self._boxes.pop(id(entry), None)
        if box is not None:
            box[0] = None
        self._stale += 1
        if self._stale > 64 and self._stale > len(self._heap) // 2:
            # Mode always with loads faster than draws evicts many items that are never drawn.
            self._heap = [node for node in self._heap if node[3][0] is not None]
            heapq.heapify(self._heap)
            self._stale = 0

    def clear(self) -> None:
        for node in self._heap:
            entry = node[3][0]
            if entry is not None:
                entry.held = False
        self._heap.clear()
        self._boxes.clear()
        self._stale = 0

    def rekey(self, entries: list[Entry]) -> None:
        """Key the held ``entries`` afresh from :attr:`counts` (after they were restored)."""
        self.clear()
        for entry in entries:
            self.add(entry)

    def take(self, k: int, held: int) -> list[Entry]:
        """``k`` of the ``held`` entries, least drawn first, in random order, counted as drawn.

        Without replacement while ``held >= k``, and of distinct items while that many are held;
        otherwise every held entry is drawn before any is drawn again.
        """
        drawn: list[Entry] = []
        while len(drawn) < k:
            drawn += self._round(min(k - len(drawn), held), held)
        self._rng.shuffle(drawn)  # the batch's first row would otherwise always be its least drawn item
        return drawn

    def _round(self, k: int, held: int) -> list[Entry]:
        """The ``k`` least drawn of the ``held`` entries, of distinct items where there are enough."""
        # Two copies of an item (held across a pass boundary) share its count, and keys rise only
        # after the round: both were picked together, a batch of 4 held one item twice in about
        # 1 of 200 draws. A copy of a picked item is set aside unless too few items are held.
        picked: list[Entry] = []
        copies: list[Entry] = []
        items: set[int] = set()
        while len(picked) < k and len(picked) + len(copies) < held:
            entry = self._pop()
            (copies if entry.index in items else picked).append(entry)
            items.add(entry.index)
        spare = k - len(picked)
        picked += copies[:spare]
        for entry in picked:
            self.counts[entry.index] += 1
        for entry in picked + copies[spare:]:
            self._push(entry)
        return picked

    def _push(self, entry: Entry) -> None:
        box: Box = [entry]
        self._boxes[id(entry)] = box
        key = (int(self.counts[entry.index]), self._rng.random(), next(self._numbers), box)
        heapq.heappush(self._heap, key)

    def _pop(self) -> Entry:
        while True:
            count, _, _, box = heapq.heappop(self._heap)
            entry = box[0]
            if entry is None:
                self._stale -= 1
            elif count != self.counts[entry.index]:
                # Its index was drawn since it was keyed: another copy of the same item held at a
                # pass boundary. Counts only grow during a run, so a stale key is only ever too low.
                self._push(entry)
            else:
                return entry
