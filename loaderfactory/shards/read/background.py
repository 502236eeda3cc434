"""A shard reader's background reads: predownload, local read-ahead and the next shard opened ahead.

Each is made on its first use in the process (:mod:`.predownload`, :mod:`.read_ahead`,
:mod:`loaderfactory.shards.read.next_shard`) and stopped by :meth:`ReadsAhead.close`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence

from torch.utils.data import get_worker_info

from loaderfactory.shards.read.cached_shard import Shard
from loaderfactory.shards.read.next_shard import NextShard
from loaderfactory.shards.read.predownload import Predownloader
from loaderfactory.shards.read.protocols import ReadSource
from loaderfactory.shards.read.read_ahead import ReadAhead
from loaderfactory.shards.storage.cache import human_bytes
from loaderfactory.shards.storage.store import split_scheme

log = logging.getLogger(__name__)


class ReadsAhead:
    """The background reads of one process's reader of ``source``.

    Args:
        source: the dataset read.
        open_local: opens local shard ``number`` in place (for the next shard opened ahead).

    Attributes:
        predownload: samples to fetch the shards of ahead (``source.predownload``; 0 once it turns
            out that nothing can be fetched ahead).
        local_read_ahead: whether local shards are read into the page cache ahead of their reads.
    """

    def __init__(self, source: ReadSource, open_local: Callable[[int], Shard]) -> None:
        self.source = source
        self.predownload = source.predownload
        self.local_read_ahead = source.local_read_ahead
        self.predownloader: Predownloader | None = None
        self.read_ahead: ReadAhead | None = None
        self.next_shard: NextShard | None = None
        self._open_local = open_local
        self._lock = threading.Lock()

    def predownload_after(self, index: int, order: Sequence[int] | None) -> None:
        """Fetch the shards of the samples after ``index`` in ``order`` (None: stored order)."""
        with self._lock:
            if self.predownloader is None and self.predownload:
                self.predownloader = self._new_predownloader()
            loader = self.predownloader
        if loader is not None:
            loader.advance(index, order)

    def _new_predownloader(self) -> Predownloader | None:
        """A predownloader fetching as many shards ahead as fit beside the one in use, if any."""
        cache, shards = self.source.shard_cache(), self.source.shards
        if cache is None:  # no remote shard, or fetch="range": nothing to fetch ahead
            self.predownload = 0
            return None
        largest = max(info.bytes for info in shards) or 1
        room = len(shards) if cache.limit is None else cache.limit // largest - 1
        if room < 1:
            self.predownload = 0
            log.info(
                "predownload off: cache.limit %s holds a single shard of %s",
                human_bytes(cache.limit or 0),
                human_bytes(largest),
            )
            return None
        urls = [info.url for info in shards]
        return Predownloader(cache, urls, self.source.ends, self.predownload, room)

    def read_ahead_of(self, number: int, position: int) -> None:
        """Read local shard ``number`` (just opened for sample ``position``) into the page cache
        ahead of its reads, and the next one when reads follow stored order."""
        with self._lock:
            ahead = self.read_ahead
            if ahead is None:
                info = get_worker_info()
                worker = None if info is None else (info.id, info.num_workers)
                paths = [split_scheme(shard.url)[1] for shard in self.source.shards]
                count = functools.partial(self.source.counters.add, "bytes_read_ahead")
                ahead = self.read_ahead = ReadAhead(paths, self.source.ends, count, worker)
        ends = self.source.ends
        ahead.opened(number, position - (ends[number - 1] if number else 0))

    def open_ahead(self, number: int) -> None:
        """Open local shard ``number``, the next in stored order, on a background thread."""
        with self._lock:
            ahead = self.next_shard
            if ahead is None:
                ahead = self.next_shard = NextShard(self._open_local)
        ahead.want(number)

    def take_opened(self, number: int) -> Shard | None:
        """Shard ``number`` if it was opened ahead (waiting for an opening under way); else None."""
        ahead = self.next_shard
        return None if ahead is None else ahead.take(number)

    def close(self) -> None:
        """Stop predownload and read-ahead, and close a shard opened ahead, joining their threads."""
        with self._lock:
            loader, self.predownloader = self.predownloader, None
            ahead, self.read_ahead = self.read_ahead, None
            following, self.next_shard = self.next_shard, None
        for helper in (loader, ahead, following):
            if helper is not None:
                helper.close()
