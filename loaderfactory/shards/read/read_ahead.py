"""Read local shards into the OS page cache ahead of their samples, on one background thread.

On a cold local disk, a shard's samples are otherwise read as they are asked for: its tar headers
and then each sample, one synchronous read after another, with the decoding waiting on each. When
a process opens a local shard, its read-ahead thread reads that shard from the sample asked for to
its end and then from its start, and the next shard when the shards are being read in stored order
(this one opened right after the one before it, or at its first sample). The reads go into one
reused 1 MiB buffer; the OS keeps the data in its page cache, where the samples' reads find it.

A piece whose first and last pages are already in the page cache is skipped, after a one-byte
probe of each that fails instead of waiting for the disk (``RWF_NOWAIT``), so a warm disk costs
next to nothing. In a DataLoader worker, only the shards whose number modulo the worker count is
the worker's id are read ahead: the workers read batches of every shard between them, and one read
fills the cache for all of them. A job whose ranks span machines reads nothing ahead
(:func:`job_spans_machines`): each machine reads only a part of each shard.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence

PIECE = 1 << 20
"""Bytes per read: large enough for the disk, small enough that a close stops the thread quickly."""
PAGE = 4096
log = logging.getLogger(__name__)


def supported() -> bool:
    """Whether this platform has the positioned reads read-ahead uses."""
    return hasattr(os, "preadv")


def job_spans_machines() -> bool:
    """Whether the launcher says this job's ranks run on more than one machine: torchrun's
    ``WORLD_SIZE`` above its ``LOCAL_WORLD_SIZE``, or SLURM's ``SLURM_NNODES`` above 1. Each rank
    then reads every ``WORLD_SIZE``-th sample, and a machine only a part of each shard."""
    world, local = os.environ.get("WORLD_SIZE", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    nodes = os.environ.get("SLURM_NNODES", "1")
    try:
        return bool(world and local and int(world) > int(local)) or int(nodes) > 1
    except ValueError:
        return False


class ReadAhead:
    """Reads local shard files into the page cache ahead of use, on a thread that runs while there
    is something to read (started by :meth:`opened`, ended when its queue is empty or by
    :meth:`close`).

    Args:
        paths: the local path of each shard, in stored order.
        ends: the cumulative sample counts of the shards.
        count: called with the bytes each piece read from the disk.
        worker: ``(id, count)`` of the DataLoader worker this runs in, None in the main process.
    """

    def __init__(
        self,
        paths: Sequence[str],
        ends: Sequence[int],
        count: Callable[[int], None],
        worker: tuple[int, int] | None,
    ) -> None:
        self.paths, self.ends, self.count = list(paths), list(ends), count
        self.worker = worker
        self._queue: deque[tuple[int, int]] = deque()  # (shard, sample to start from)
        self._reading = -1  # the shard the thread reads now
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._last_opened = -2
        self._advised: set[int] = set()  # shards the kernel was asked to read ahead

    def opened(self, shard: int, local: int) -> None:
        """Shard ``shard`` was just opened to read its sample ``local``: read it ahead from there,
        and the next shard too when the shards are being read in stored order."""
        with self._lock:
            in_order = shard == self._last_opened + 1 or local == 0
            self._last_opened = shard
            ahead = [(shard, local)]
            if in_order and shard + 1 < len(self.paths):
                ahead.append((shard + 1, 0))
            queued = {number for number, _ in self._queue} | {self._reading}
            self._queue.extend(job for job in ahead if self._ours(job[0]) and job[0] not in queued)
            if self._queue and self._thread is None and not self._cancel.is_set():
                thread = threading.Thread(target=self._run, name="loaderfactory-read-ahead", daemon=True)
                thread.start()  # before wait() on another thread can see it: it joins only started threads
                self._thread = thread  # it clears this, under the lock held here, when it ends

    def _ours(self, shard: int) -> bool:
        return self.worker is None or shard % self.worker[1] == self.worker[0]

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._cancel.is_set():
                    self._thread, self._reading = None, -1
                    return
                shard, local = self._queue.popleft()
                self._reading = shard
            self._read(shard, local)

    def _advise_queued(self) -> None:
        """Ask the disk now for the shards queued behind the one being read (the kernel reads them
        in the background), not only when their turn comes: a shuffled read wants them all at once."""
        with self._lock:
            waiting = [number for number, _ in self._queue if number not in self._advised]
            self._advised.update(waiting)
        for number in waiting:
            _advise(self.paths[number])

    def _read(self, shard: int, local: int) -> None:
        samples = self.ends[shard] - (self.ends[shard - 1] if shard else 0)
        try:
            with open(self.paths[shard], "rb", buffering=0) as file:
                size = os.fstat(file.fileno()).st_size
                start = size * local // max(1, samples) // PAGE * PAGE
                self._read_range(file.fileno(), start, size)
                self._read_range(file.fileno(), 0, start)
        except OSError as err:  # the read needing this shard raises it, naming the shard
            log.debug("read-ahead of %s failed: %s", self.paths[shard], err)

    def _read_range(self, descriptor: int, start: int, stop: int) -> None:
        """Bytes ``[start, stop)`` into the page cache, skipping pieces already there."""
        buffer, probe = bytearray(PIECE), bytearray(1)
        nowait = getattr(os, "RWF_NOWAIT", 0)
        offset = start
        while offset < stop and not self._cancel.is_set():
            self._advise_queued()
            end = min(offset + PIECE, stop)
            if nowait:
                try:
                    if all(_cached(descriptor, probe, at, nowait) for at in (offset, end - 1)):
                        offset = end
                        continue
                except BlockingIOError:
                    pass  # not cached: read it
                except OSError as err:
                    if err.errno != errno.EOPNOTSUPP:
                        raise
                    nowait = 0  # this file system waits anyway: read every piece
            got = os.preadv(descriptor, [memoryview(buffer)[: end - offset]], offset)
            if got <= 0:
                return
            self.count(got)
            offset += got

    def wait(self) -> None:
        """Block until the reads scheduled so far are done (for tests and benchmarks)."""
        while (thread := self._thread) is not None:
            thread.join()

    def close(self) -> None:
        """Stop the read in progress between pieces, drop the queued ones, and join the thread (in
        the process that made this object: :mod:`.reader` never closes a forked copy)."""
        self._cancel.set()
        self.wait()


def _advise(path: str) -> None:
    """Ask the kernel to read the file at ``path`` into the page cache in the background."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # the read needing this shard raises it, naming the shard
    try:
        advise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError as err:
        log.debug("read-ahead advice for %s failed: %s", path, err)
    finally:
        os.close(descriptor)


def _cached(descriptor: int, probe: bytearray, offset: int, nowait: int) -> bool:
    """Whether the page holding byte ``offset`` is in the page cache (BlockingIOError: it is not)."""
    return os.preadv(descriptor, [probe], offset, nowait) > 0
