"""Open the next local shard on a background thread while the current one is read.

Opening a tar shard walks its headers: about 20 ms for a 64 MB shard of 4 KB samples, most of it
numpy work that releases the GIL. When shards are read in stored order, the reader asks for the
next one here as it opens each shard; the walk then runs beside the reads of the current shard,
and the reader takes the opened shard when it gets there (waiting for a walk under way rather
than walking the shard a second time). An opening that fails is dropped: the reader opens the
shard itself, which raises the same error with its usual context.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from loaderfactory.shards.read.cached_shard import Shard

log = logging.getLogger(__name__)


class NextShard:
    """At most one shard opened ahead, by ``open_shard(number)`` on a thread of its own."""

    def __init__(self, open_shard: Callable[[int], Shard]) -> None:
        self.open_shard = open_shard
        self._lock = threading.Lock()
        self._number = -1
        self._done = threading.Event()
        self._shard: Shard | None = None
        self._threads: list[threading.Thread] = []  # openings started, some perhaps no longer wanted
        self._closed = False

    def want(self, number: int) -> None:
        """Start opening shard ``number`` unless it is the one opened (or opening) already; a
        shard opened ahead and not taken is closed."""
        with self._lock:
            if self._closed or number == self._number:
                return
            self._drop()
            self._number, self._done = number, threading.Event()
            thread = threading.Thread(
                target=self._open, args=(number, self._done), name="loaderfactory-next-shard", daemon=True
            )
            thread.start()  # before close() on another thread can see it: it joins only started threads
            self._threads = [*(t for t in self._threads if t.is_alive()), thread]

    def _open(self, number: int, done: threading.Event) -> None:
        try:
            shard: Shard | None = self.open_shard(number)
        except Exception as err:  # noqa: BLE001 - the reader's own opening raises it, in context
            log.debug("opening shard %d ahead failed: %s", number, err)
            shard = None
        with self._lock:
            if self._number == number and self._done is done and not self._closed:
                self._shard = shard
                shard = None
        if shard is not None:  # no longer wanted
            shard.close()
        done.set()

    def take(self, number: int) -> Shard | None:
        """Shard ``number`` if it was opened ahead (waiting for an opening under way); None if not."""
        with self._lock:
            if number != self._number or self._closed:
                return None
            done = self._done
        done.wait()
        with self._lock:
            if number != self._number or self._done is not done:
                return None
            shard, self._shard, self._number = self._shard, None, -1
        return shard

    def _drop(self) -> None:
        """Forget the shard wanted (closing it if already opened); with the lock held."""
        if self._shard is not None:
            self._shard.close()
        self._shard, self._number = None, -1

    def close(self) -> None:
        """Close a shard opened ahead, wait for the openings under way (each closes what it opens),
        and start nothing more (in the process that made this object: :mod:`.reader` never closes a
        forked copy)."""
        with self._lock:
            self._closed = True
            self._drop()
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()
