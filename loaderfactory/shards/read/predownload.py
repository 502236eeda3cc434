"""Fetch the shards a dataset will read next into its cache, on a few background threads.

The rule (it needs nothing but the sample just read, so it works alike in the main process and in
each DataLoader worker): after reading sample ``i``, find its position ``p`` in the expected order
(``ShardReader.visit_order``: the window order of the epoch being read, which reaches DataLoader
workers with the batches, see :mod:`~loaderfactory.components.epoch_announce`; else stored order),
take the samples at positions ``p+1 .. p+predownload``, and fetch their shards, nearest first, at
most ``max_shards`` of them (what the cache's limit leaves beside the shard in use). The next
``THREADS`` shards the order reads are always among them, even where the window ends before their
first samples, so that every fetch thread has a shard to fetch while this one is read (a shard of
small samples is read faster than the next one is fetched). The window is looked at again every
``predownload // 4`` samples, or at once when the reads jump.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.cancel import Cancel, cancelled_by

THREADS = 2
"""Fetches in flight per process: shards are large, so two keep a link busy without many requests."""
NEXT_SHARD_SCAN = 1 << 16
"""Positions looked at per step when the window ahead lies inside the shard being read."""
log = logging.getLogger(__name__)


class Predownloader:
    """Fetches ahead into ``cache`` the shards of the next ``samples`` samples on ``THREADS`` threads.

    Costs up to ``THREADS`` threads (started on the first fetch, stopped by :meth:`close` or when
    this object is collected) and ``max_shards`` shards of cache space.

    Args:
        cache: the cache to fill.
        urls: the dataset's shard URLs, in stored order.
        ends: the cumulative sample counts of the shards (``ends[k]`` = samples in shards 0..k).
        samples: how many samples ahead to look.
        max_shards: the most shards fetched ahead of the one being read.
    """

    def __init__(
        self, cache: ShardCache, urls: Sequence[str], ends: Sequence[int], samples: int, max_shards: int
    ) -> None:
        self.cache, self.urls, self.ends = cache, list(urls), list(ends)
        self._ends_array = np.asarray(self.ends, dtype=np.int64)
        self.samples, self.max_shards = samples, max_shards
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="loaderfactory-predownload")
        self._pending: dict[int, Future[str]] = {}
        self._cancel = Cancel()
        self._order: Sequence[int] | None = None
        self._positions: np.ndarray | None = None
        self._last_scan = -1
        self._lock = threading.Lock()
        self.failed = 0

    def advance(self, index: int, order: Sequence[int] | None) -> None:
        """Sample ``index`` is being read: schedule the shards ahead of it when the window moved."""
        with self._lock:
            if order is not self._order:
                self._order, self._positions, self._last_scan = order, None, -1
            position = self._position(index)
            step = max(1, self.samples // 4)
            if self._last_scan >= 0 and 0 <= position - self._last_scan < step:
                return
            self._last_scan = position
            for shard in self._shards_after(position):
                future = self._pending.get(shard)
                if future is None or future.done():
                    self._pending[shard] = self._pool.submit(self._fetch, shard)
            self._pending = {s: f for s, f in self._pending.items() if not f.done()}

    def _position(self, index: int) -> int:
        if self._order is None:
            return index
        if self._positions is None:
            order = np.asarray(self._order, dtype=np.int64)
            self._positions = np.full(self.ends[-1], -1, dtype=np.int64)
            self._positions[order] = np.arange(len(order))
        position = int(self._positions[index])
        return position if position >= 0 else index  # not in the order told: fall back to stored

    def _sample_at(self, position: int) -> int | None:
        if self._order is None:
            return position if position < self.ends[-1] else None
        return int(self._order[position]) if position < len(self._order) else None

    def _shards_after(self, position: int) -> list[int]:
        """The shards of the samples at positions ``position+1 .. position+samples``, nearest first,
        and at least the next ``THREADS`` shards the order reads (however far ahead they start)."""
        current = self._shard_of(self._sample_at(position))
        if self._order is None:  # stored order: the shards after the current one, up to the window's end
            last = self._shard_of(min(position + self.samples, self.ends[-1] - 1))
            last = max(last, min(current + THREADS, len(self.ends) - 1))
            return list(range(current + 1, min(last, current + self.max_shards) + 1))
        found = self._shards_in(position + 1, position + 1 + self.samples, current)
        start = position + 1 + self.samples
        while len(found) < THREADS and start < len(self._order):  # the window ends a shard or two ahead
            later = self._shards_in(start, start + NEXT_SHARD_SCAN, current)
            found += [shard for shard in later if shard not in found][: THREADS - len(found)]
            start += NEXT_SHARD_SCAN
        return found[: self.max_shards]

    def _shards_in(self, start: int, stop: int, current: int) -> list[int]:
        """The shards other than ``current`` of the samples at positions ``start .. stop - 1`` of the
        order, in the order their first samples come."""
        assert self._order is not None
        samples = np.asarray(self._order[start:stop], dtype=np.int64)
        shards = np.searchsorted(self._ends_array, samples, side="right")
        _, firsts = np.unique(shards, return_index=True)
        return [int(shard) for shard in shards[np.sort(firsts)] if shard != current]

    def _shard_of(self, sample: int | None) -> int:
        return -1 if sample is None else bisect.bisect_right(self.ends, sample)

    def _fetch(self, shard: int) -> str:
        try:
            with cancelled_by(self._cancel):  # every request of the fetch, its size's too
                return self.cache.local(self.urls[shard], self._cancel)
        except Exception as err:  # noqa: BLE001  # the read needing this shard raises it, with context
            self.failed += 1
            log.debug("predownload of %s failed: %s", self.urls[shard], err)
            return ""

    def wait(self) -> None:
        """Block until the fetches scheduled so far are done (for tests and benchmarks)."""
        with self._lock:
            pending = list(self._pending.values())
        futures.wait(pending)

    def close(self) -> None:
        """Cancel what is queued, stop the fetches in flight (whatever their requests wait for), and
        join the threads (in the process that made this object: :mod:`.reader` never closes a
        forked copy)."""
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
