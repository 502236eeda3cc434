"""Counters of a shards dataset's reads, added to by every process and thread that reads it.

A DataLoader worker reads in a process of its own, so counts kept in Python objects stay there. Here
each reading thread gets a small file of its own in one temporary folder (``<pid>-<tid>``: its
counters as 64-bit integers, mapped into memory) and adds to it without a lock, since nothing else
writes it; :meth:`ShardStats.totals` sums the files. The folder travels with the dataset to worker
processes (forked or spawned, persistent or not: a new worker adds a file of its own), and the
process that made it removes it when the dataset is collected, or at exit.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import shutil
import tempfile
import threading
import time
import weakref
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

COUNTERS = (
    "bytes_remote",  # read from remote storage (range reads and shard fetches)
    "bytes_local",  # read from local files (local shards and cached copies)
    "remote_ns",  # spent in remote requests, retries' backoff included
    "hold_ns",  # readers spent getting a cached shard (fetching it, or waiting for another's fetch)
    "hits",  # cached shards found in the cache
    "fetched",  # shards fetched into the cache
    "bytes_fetched",
    "evicted",  # cached shards deleted to make room
    "retries",  # remote requests retried after a transient error
    "opened",  # shards opened for reading
    "first_opened",  # shards opened for the first time in their process
    "bytes_read_ahead",  # read from local shards into the page cache ahead of their samples
    "samples",  # samples read
    "row_groups_read",  # Parquet row groups read and decoded
)
_SLOT = {name: number for number, name in enumerate(COUNTERS)}
_ROW_BYTES = 8 * len(COUNTERS)
_FORKS = [0]
"""Forks this process descends from: a forked child's thread must leave its parent's row (asking
the system for the thread's id on every add would cost a system call)."""


def _forked() -> None:
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_forked)


class NoStats:
    """Counts nothing: the counters of a :class:`~loaderfactory.shards.storage.store.Storage` that no
    dataset reads through (indexing, packing)."""

    def add(self, counter: str, amount: int = 1) -> None:
        """Count nothing."""

    def opened(self, shard: int) -> None:
        """Count nothing."""

    @contextlib.contextmanager
    def timed(self, counter: str) -> Iterator[None]:
        """Time nothing."""
        yield

    def open(self, path: str) -> BinaryIO:
        """``path`` opened for reading, as ``open(path, "rb")``."""
        return open(path, "rb")


class ShardStats(NoStats):
    """Counters summed across the processes and threads that read one dataset.

    Costs one temporary folder (``tempfile.gettempdir()``) with a file of ``8 * len(COUNTERS)``
    bytes per reading thread, and about a microsecond per :meth:`add`. Picklable: a copy adds to
    the same folder, which only the process that made this object removes.
    """

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="loaderfactory-stats-")
        self._local = threading.local()
        self._seen: tuple[int, set[int]] = (os.getpid(), set())  # shards opened in this process
        weakref.finalize(self, _remove, self.folder, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.folder = state["folder"]
        self._local = threading.local()
        self._seen = (os.getpid(), set())

    def add(self, counter: str, amount: int = 1) -> None:
        """Add ``amount`` to ``counter`` (one of :data:`COUNTERS`) in this thread's row."""
        local = self._local
        if getattr(local, "forks", -1) != _FORKS[0]:  # this thread's first add, or a forked child's
            local.row, local.forks = self._claim_row(threading.get_native_id()), _FORKS[0]
        row = local.row
        if row is not None:
            row[_SLOT[counter]] += amount

    def opened(self, shard: int) -> None:
        """Count shard number ``shard`` opened, and whether this process opens it for the first
        time (a forked child starts afresh): :func:`summarise` compares the two."""
        pid, seen = self._seen
        if pid != os.getpid():
            pid, seen = self._seen = (os.getpid(), set())
        self.add("opened")
        if shard not in seen:
            seen.add(shard)
            self.add("first_opened")

    @contextlib.contextmanager
    def timed(self, counter: str) -> Iterator[None]:
        """Add the nanoseconds the ``with`` block takes to ``counter``."""
        began = time.perf_counter_ns()
        try:
            yield
        finally:
            self.add(counter, time.perf_counter_ns() - began)

    def open(self, path: str) -> BinaryIO:
        """``path`` opened for buffered reading, the bytes it reads counted as ``bytes_local``."""
        return io.BufferedReader(_CountedFile(path, self))

    def _claim_row(self, thread: int) -> memoryview | None:
        """This thread's counters, mapped from ``<pid>-<tid>`` in the folder (created if absent; a
        thread id the system reused adds to what its dead predecessor counted)."""
        path = os.path.join(self.folder, f"{os.getpid()}-{thread}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:  # the folder is gone: the dataset that owns it was collected
            return None
        try:
            if os.fstat(fd).st_size < _ROW_BYTES:
                os.ftruncate(fd, _ROW_BYTES)
            return memoryview(mmap.mmap(fd, _ROW_BYTES)).cast("q")
        finally:
            os.close(fd)

    def totals(self) -> dict[str, int]:
        """Every counter summed over the threads of every process that added to it, plus
        ``processes``: how many processes did."""
        sums = [0] * len(COUNTERS)
        processes: set[str] = set()
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                # A row just created may not have its length yet: its missing counters are zero.
                values = array("q", Path(entry.path).read_bytes()[:_ROW_BYTES].ljust(_ROW_BYTES, b"\0"))
                sums = [total + value for total, value in zip(sums, values, strict=True)]
                processes.add(entry.name.partition("-")[0])
        return {**dict(zip(COUNTERS, sums, strict=True)), "processes": len(processes)}


class _CountedFile(io.FileIO):
    """A file whose reads add their byte counts to ``stats``."""

    def __init__(self, path: str, stats: ShardStats) -> None:
        super().__init__(path, "rb")
        self.stats = stats

    def readinto(self, buffer: Any) -> int | None:
        count = super().readinto(buffer)
        if count:
            self.stats.add("bytes_local", count)
        return count


def _remove(folder: str, owner: int) -> None:
    """Remove the counters' folder, only in the process that made it (a forked copy collected in a
    worker must not take it from the main process)."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


OPENED_FAR_MORE = 4
"""How many times more shard opens than the epochs' order needs :func:`summarise` reports as a note."""


def summarise(totals: dict[str, int], cached: bool, samples: int = 0, shards: int = 0) -> dict[str, Any]:
    """The report's ``shards`` section from :meth:`ShardStats.totals`, for a dataset of ``samples``
    samples in ``shards`` shards.

    ``fetch_wait_s`` is what readers waited on storage: getting cached shards when there is a cache
    (``cached``), else their remote reads themselves. ``note`` (only when there is something to say)
    flags shards opened far more often than the order the dataset offers needs (:func:`open_note`).
    """
    wait_ns = totals["hold_ns"] if cached else totals["remote_ns"]
    summary: dict[str, Any] = {
        "shards_opened": totals["opened"],
        "shards_reopened": totals["opened"] - totals["first_opened"],
        "samples_read": totals["samples"],
        "bytes_read": totals["bytes_remote"] + totals["bytes_local"],
        "bytes_read_remote": totals["bytes_remote"],
        "bytes_read_local": totals["bytes_local"],
        "bytes_read_ahead": totals["bytes_read_ahead"],
        "row_groups_read": totals["row_groups_read"],
        "fetch_wait_s": round(wait_ns / 1e9, 4),
        "remote_request_s": round(totals["remote_ns"] / 1e9, 4),
        "cache_hits": totals["hits"],
        "cache_fetches": totals["fetched"],
        "cache_bytes_fetched": totals["bytes_fetched"],
        "cache_evictions": totals["evicted"],
        "retries": totals["retries"],
        "processes": totals["processes"],
    }
    note = open_note(totals, samples, shards)
    if note:
        summary["note"] = note
    return summary


def open_note(totals: dict[str, int], samples: int, shards: int) -> str:
    """What to do when shards were opened far more often than the dataset's own order needs; "" else.

    Read in its own order (stored, or ``epoch_order``'s windows with ``open_shards`` ≥
    ``shuffle_window``), a process opens each shard at most once an epoch, so the opens stay within
    the shards each process opened at least once times the epochs read (samples read over
    ``samples``, a started epoch counting whole). Past :data:`OPENED_FAR_MORE` times that, samples
    were asked for in another order, nearly each in a shard no longer open.
    """
    first, opened = totals["first_opened"], totals["opened"]
    epochs = max(1, -(-totals["samples"] // samples)) if samples else 1
    if not first or opened <= OPENED_FAR_MORE * first * epochs:
        return ""
    return (
        f"shards were opened {opened} times for {totals['samples']} sample reads of {shards} shard(s)"
        f" ({opened / (first * epochs):.0f}x what reading in the dataset's own order needs). Likely"
        " a Dataset wrapping the ShardsDataset (for augmentation, say) without forwarding its"
        " epoch_order, so a shuffle reads samples in uniform random order: subclass"
        " loaderfactory.ForwardEpochOrder, or give the wrapper epoch_order(seed, epoch) returning"
        " its dataset's; else a sampler of your own, or open_shards below shuffle_window"
    )
