"""``ShardReader``: one process's reads of a shards dataset: its open shards and its background reads.

A :class:`~loaderfactory.shards.dataset.ShardsDataset` describes what to read and pickles without
open files; each process reading it gets one reader (``dataset.reader()``: a new one in a forked or
spawned worker), which owns

* the open shards: the ``open_shards`` most recently used, under one lock, each opened from the
  cache (a remote shard, fetched whole) or in place, and checked against its index entry;
* predownload (:mod:`.predownload`): the shards of the coming samples fetched ahead, in the visit
  order of the epoch being read (:attr:`ShardReader.visit_order`);
* local read-ahead (:mod:`.read_ahead`) and the next local shard opened ahead (:mod:`.next_shard`),
  held by :class:`~loaderfactory.shards.read.background.ReadsAhead`;

and :meth:`ShardReader.close`, which closes them all. Batches are read by :mod:`.batch`
through the reader (a :class:`~loaderfactory.shards.read.protocols.BatchSource`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from loaderfactory.components.epoch_announce import EpochTag
from loaderfactory.shards.errors import READ_ERRORS, ShardChangedError, ShardError, in_sample
from loaderfactory.shards.formats.parquet import ParquetShard
from loaderfactory.shards.formats.tar.shard import TarShard
from loaderfactory.shards.index.shard_index import ShardInfo
from loaderfactory.shards.order import window_order
from loaderfactory.shards.read.background import ReadsAhead
from loaderfactory.shards.read.batch import read_batch
from loaderfactory.shards.read.cached_shard import CachedShard, Shard
from loaderfactory.shards.read.protocols import ReadSource
from loaderfactory.shards.storage.store import is_remote

_INHERITED: list[ReadsAhead] = []
"""A forked child's copies of its parent's background reads, kept referenced: their threads ran in
the parent and their locks may have been held at the fork, and dropping them would run callbacks
(the executors' and finalizers') that take those locks."""


class ShardReader:
    """Reads samples of ``source`` in this process; see the module docstring.

    Costs up to ``open_shards`` open shards, and the threads of predownload and read-ahead while
    they have something to do; :meth:`close` ends them.
    """

    def __init__(self, source: ReadSource) -> None:
        self.source = source
        self.pid = os.getpid()
        self.shards, self.ends, self.shape = source.shards, source.ends, source.shape
        self.counters = source.counters
        self.opened: OrderedDict[int, Shard] = OrderedDict()
        """The open shards by number, least recently used first."""
        self.visit_order: Sequence[int] | None = None
        """The order the coming reads follow (global sample indices), for predownload; None:
        stored order. Follows the source's :attr:`epoch_tag` (see :meth:`follow`)."""
        self._visit_tag: EpochTag | None = None
        self.ahead = ReadsAhead(source, lambda number: self.open_local(number))
        self._lock = threading.Lock()
        self._last_opened, self._in_order = -2, 0  # shards opened in a row in stored order

    def __len__(self) -> int:
        return len(self.source)

    def read_sample(self, index: int) -> Any:
        """Sample ``index`` as read (the item as packed, or the raw sample), before transforms."""
        position = index if index >= 0 else index + len(self)
        shard, local = self.source.locate(position)
        url = self.shards[shard].url
        try:
            sample = self.shard(shard, position).sample(local)
        except READ_ERRORS as err:  # a server gone after the retries, a truncated or corrupt shard
            raise in_sample(err, f"while reading sample #{local} of the shard (#{position} overall)") from err
        key = sample["__key__"]
        item = self.shape(sample, url)
        absent = self.shape.absent(item)
        if absent:
            raise ShardError(
                f"{url}: sample {key!r} (#{local} in the shard, #{index} overall) has no "
                f"{', '.join(map(repr, absent))}; it has {self.shape.present(item)}"
            )
        self.counters.add("samples")
        return item

    def read_batch(self, indices: Sequence[int]) -> list[Any]:
        """``[self.read_sample(i) for i in indices]``, each shard's runs read at once (:mod:`.batch`),
        then predownload advanced once, to the batch's last sample (a shuffled batch reads from most
        shards of its window: once per shard read would cost more than the reads of small samples).
        Advancing after the reads keeps the rule of :meth:`shard`: the shards in use are held first."""
        read = read_batch(self, indices)
        if indices and self.ahead.predownload:
            last = indices[-1] if indices[-1] >= 0 else indices[-1] + len(self)
            if 0 <= last < len(self):
                self.ahead.predownload_after(last, self._current_order())
        return read

    def open_run(self, shard: int, first: int, last: int) -> Shard:
        """Shard ``shard`` opened for samples ``first`` to ``last`` of a batch (predownload advanced
        for the batch), its failure raised as reading sample ``first`` raises it (without opening it
        again, and so without its retries again)."""
        try:
            return self.shard(shard, last, first, advance=False)
        except READ_ERRORS as err:
            local = first - (self.ends[shard - 1] if shard else 0)
            raise in_sample(err, f"while reading sample #{local} of the shard (#{first} overall)") from err

    def shard(self, number: int, position: int, first: int | None = None, advance: bool = True) -> Shard:
        """Shard ``number``, opened for reading samples ``first`` (default: ``position``) to
        ``position``, with predownload advanced (unless ``advance`` is off: a batch advanced it, or
        when a new shard is opened) and read-ahead started, if it was not open.

        The first shard a process reads (none open yet, so none held) has the fetches ahead start
        before its own fetch, to run beside it instead of after it: they take the cache's room
        beside one shard, which is this one. Later shards are held first (the window's room is
        beside the shard in use, and it must not be evicted), then the window is looked at again.
        """
        ahead = self.ahead
        if ahead.predownload and not self.opened and self._must_fetch(number):
            ahead.predownload_after(position, self._current_order())
        new = number not in self.opened
        opened = self._lru_shard(number)
        if new and ahead.local_read_ahead and not is_remote(self.shards[number].url):
            ahead.read_ahead_of(number, position if first is None else first)
            self._in_order = self._in_order + 1 if number == self._last_opened + 1 else 0
            self._last_opened = number
            if self._in_order >= 2:  # two shards in a row in stored order: the next one comes next
                self._open_ahead(number + 1)
        if ahead.predownload and (advance or new):
            ahead.predownload_after(position, self._current_order())
        return opened

    def _must_fetch(self, number: int) -> bool:
        url, cache = self.shards[number].url, self.source.shard_cache()
        return cache is not None and is_remote(url) and not cache.holds(url)

    def _lru_shard(self, number: int) -> Shard:
        """Shard ``number`` from the open ones, else opened (taken from the shard opened ahead, if
        it is that one), the least recently used closed to make room."""
        with self._lock:
            shard = self.opened.get(number)
            if shard is not None:
                self.opened.move_to_end(number)
                return shard
            # Close the least recently used first: a cached one then makes room for this one.
            while len(self.opened) >= self.source.open_shards:
                self.opened.popitem(last=False)[1].close()
            info = self.shards[number]
            opened = self.ahead.take_opened(number)
            if opened is None:
                try:
                    opened = self.open_shard(info)
                except ShardChangedError as err:
                    raise ShardChangedError(f"{err}: {self.source.index_again(info.url)}") from err
            if len(opened) != info.samples:
                opened.close()
                raise ShardError(
                    f"{info.url}: has {len(opened)} samples but the index says {info.samples};"
                    f" the shard changed since it was indexed: {self.source.index_again(info.url)}"
                )
            self.opened[number] = opened
            self.source.storage.stats.opened(number)
            return opened

    def open_shard(self, info: ShardInfo) -> Shard:
        """The shard of ``info``: from the cache when there is one and it is remote, else in place."""
        cache = self.source.shard_cache()
        if cache is None or not is_remote(info.url):
            return self._read_in_place(info, info.url)
        held = cache.hold(info.url)
        return CachedShard(held, info.url, lambda path: self._read_in_place(info, path))

    def open_local(self, number: int) -> Shard:
        """Local shard ``number``, opened in place (on the thread that opens the next one ahead)."""
        info = self.shards[number]
        return self._read_in_place(info, info.url)

    def _read_in_place(self, info: ShardInfo, path: str) -> Shard:
        """Shard ``info``, read from ``path`` (its URL, or its cached copy) in its format."""
        format_class = TarShard if info.format == "tar" else ParquetShard
        return format_class(self.source.storage, path, self.source.decode)

    def _open_ahead(self, number: int) -> None:
        """Open local shard ``number``, the next in stored order, on a background thread."""
        if number >= len(self.shards) or is_remote(self.shards[number].url):
            return
        with self._lock:
            if number in self.opened:
                return
        self.ahead.open_ahead(number)

    def follow(self, tag: EpochTag | None, order: Sequence[int] | None) -> None:
        """Visit ``order`` (computed for ``tag`` already) from the next read on."""
        self.visit_order, self._visit_tag = order, tag

    def _current_order(self) -> Sequence[int] | None:
        """:attr:`visit_order`, computed anew when the source's epoch changed: the window order of
        a shuffled epoch, stored order (None) otherwise."""
        tag = self.source.epoch_tag
        if tag != self._visit_tag:
            order = None
            if tag is not None and tag.shuffled:
                counts = [info.samples for info in self.shards]
                order = window_order(counts, tag.seed, tag.epoch, self.source.shuffle_window).tolist()
            self.follow(tag, order)
        return self.visit_order

    def close(self) -> None:
        """Close the open shards and stop predownload and read-ahead (waiting for their threads)."""
        with self._lock:
            opened = list(self.opened.values())
            self.opened.clear()
        for shard in opened:
            shard.close()
        self.ahead.close()

    def adopt(self, parent: ShardReader) -> None:
        """Take over the open shards of ``parent``, a forked copy of the parent process's reader
        (their files are this process's too; a cached one's hold is shared, never unlocked, see
        :class:`~loaderfactory.shards.storage.cache_files.HeldShard`); its background reads, whose threads
        ran in the parent, are kept referenced and never touched."""
        self.opened = OrderedDict(parent.opened)
        _INHERITED.append(parent.ahead)
