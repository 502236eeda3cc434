"""``ShardsDataset``: a map-style dataset over webdataset tar and Parquet shards, local or remote."""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any

from torch.utils.data import Dataset, get_worker_info

from loaderfactory.shards.batch_read import read_batch
from loaderfactory.shards.broadcast import on_rank_zero
from loaderfactory.shards.cache import ShardCache, human_bytes
from loaderfactory.shards.cached_shard import CachedShard, Shard
from loaderfactory.shards.decode import Decode, decoding
from loaderfactory.shards.errors import READ_ERRORS, ShardChangedError, ShardError, in_sample
from loaderfactory.shards.index import ShardInfo, build_index, find_shard_index, index_url, read_index
from loaderfactory.shards.index_cache import cached_index_path, forget, index_through_cache
from loaderfactory.shards.item_layout import ItemLayout, SampleShape
from loaderfactory.shards.next_shard import NextShard
from loaderfactory.shards.order import window_order
from loaderfactory.shards.parquet_format import ParquetShard
from loaderfactory.shards.predownload import THREADS, Predownloader
from loaderfactory.shards.private_folder import PrivateFolder
from loaderfactory.shards.published_order import PublishedOrder
from loaderfactory.shards.read_ahead import ReadAhead, job_spans_machines
from loaderfactory.shards.read_ahead import supported as read_ahead_supported
from loaderfactory.shards.sample_transforms import SampleTransforms
from loaderfactory.shards.shuffle_window import (
    DEFAULT_OPEN_SHARDS,
    DEFAULT_SHUFFLE_MEMORY,
    resolve_window,
    window_bytes,
)
from loaderfactory.shards.stats import ShardStats, summarise
from loaderfactory.shards.storage import Storage, is_remote, split_scheme
from loaderfactory.shards.tar_format import TarShard
from loaderfactory.shards.urls import check_listing, expand_urls

log = logging.getLogger(__name__)
KeptIndex = tuple[str, frozenset[str]]
"""The path of the index kept in ``cache_dir`` that a dataset's entries went through, and the URLs
whose entries were read from it (not built at this start)."""


class ShardsDataset(Dataset[dict[str, Any]]):
    """Samples of tar or Parquet shards by global index; ``len()`` comes from the index alone.

    Sample ``i`` is found by a bisect over the shards' cumulative sample counts; its shard is opened
    on first use (tar headers or the Parquet footer only) and kept among the ``open_shards`` most
    recently used. Shards written by ``pack`` give back each item as it was packed (a dict with its
    keys, a tuple, a list or the single value; numpy arrays come back as tensors), their index
    recording how (:mod:`.item_layout`); other shards, or ``fields="raw"``, give the webdataset
    sample: a dict of its decoded fields by stored name (``image.npy``) plus ``__key__`` and
    ``__url__``.
    Picklable: worker processes get no open shards and open their own. Under an initialised
    ``torch.distributed`` group only rank 0 lists the shards and reads (or builds) the index, and
    broadcasts them to the other ranks.

    Args:
        urls: a list, a brace pattern, a folder or prefix ending in ``/``, or a local glob
            (see :func:`loaderfactory.shards.urls.expand_urls`).
        index: the index's URL, or its entries; None: ``loaderfactory-shards.json`` beside the shards,
            else the shards are indexed now (each read once; logged).
        keys: what every sample must have: the item's keys (dict items of packed shards), else
            stored field names (``image.npy``); a sample without one raises ShardError naming it.
        fields: ``"item"``: packed shards give back their items as packed (others read raw);
            ``"raw"``: every shard gives stored field names plus ``__key__`` and ``__url__``.
        metadata: add ``__key__`` and ``__url__`` to the dict items of packed shards (raw samples
            always have them); refused (ArgumentError) for tuple, list and single-value items.
        decode: True (every known extension), False (bytes), or the extensions to decode.
        image_size: decoded images come out this size: ``224`` (square) or ``(height, width)``;
            JPEGs decode scaled down by libjpeg first (:mod:`.media`). None: as stored.
        image_mode: decoded images in this mode: ``"RGB"`` (3 channels), ``"L"`` (1), ``"RGBA"``
            (4); None: as stored.
        storage_options: settings for remote storage (``endpoint_url``, ``key``, ``secret``, ...).
        retries: retries of a failing remote read, with backoff.
        open_shards: how many shards stay open (open Parquet shards keep the row groups they read,
            up to 256 MiB a process for all of them:
            :data:`~loaderfactory.shards.row_groups_held.ROW_GROUPS_HELD_BYTES`); None: the
            window, at least 4. A shuffled epoch needs at least the window.
        shuffle_window: shards whose samples a shuffled epoch mixes at a time (:meth:`epoch_order`);
            ``"auto"``: as many of the largest shard as fit in ``shuffle_memory``, 1 to 64
            (:mod:`~loaderfactory.shards.shuffle_window`).
        shuffle_memory: the bytes of shards an automatic window may hold at once (page cache for
            local shards, cache space for remote ones).
        shard_format: ``"tar"`` or ``"parquet"`` for shards indexed here whatever their extension;
            ``"auto"``: by extension.
        cache_dir: a local folder to fetch remote shards into, whole, before reading them (shared
            safely by the ranks and workers of a machine, kept after the run). None: a private
            temporary folder created now (shared by the workers this process starts later, removed
            by :meth:`close`, when the dataset is collected, or at exit; see
            :mod:`~loaderfactory.shards.private_folder`). Local shards are always read in place.
            See :class:`ShardCache`. Remote shards with no index beside them have the index built
            here kept in ``cache_dir`` for the next start (:mod:`.index_cache`).
        cache_limit: the most bytes of shards the cache keeps (least recently used evicted first,
            never a shard open anywhere on the machine); None: no bound with ``cache_dir``, and
            for the private folder what open shards and predownload need
            (:meth:`default_cache_limit`).
        predownload: how many samples ahead to fetch the shards of, on background threads (the
            rule is in :mod:`loaderfactory.shards.predownload`).
        fetch: ``"whole"``: a remote shard is fetched whole into the cache once per process tree
            (once per machine with a shared ``cache_dir``) and read locally by every worker.
            ``"range"``: each read is a byte-range request and nothing is cached (every worker walks
            the tar headers itself); only for sparse reads of shards too large to fetch.
        local_read_ahead: read each local shard opened into the OS page cache on a background thread,
            and the next one when shards are read in stored order (:mod:`.read_ahead`); off where
            the job's ranks span machines.
        progress: show a progress bar on stderr while indexing shards that have no index.
        transforms: applied to each sample after it is read, where it is read: ``f(item, generator)``
            or ``f(item)``, or a list of them in order (:mod:`.sample_transforms`).
        seed: seeds the transforms' draws, with the epoch and the index; None: the shuffle's seed.

    Attributes:
        shuffle_window: the window in shards (``"auto"`` resolved from the index).
        shuffle_window_setting: the ``shuffle_window`` argument as given (``"auto"`` or a count).
        cache_is_private: True when remote shards go to the private temporary folder (no ``cache_dir``).
        index_source: where the index came from: its URL, ``"given"``, the index kept in
            ``cache_dir`` (:mod:`.index_cache`), or ``"built"`` (no index beside the shards: each
            was read once to count its samples).
        visit_order: the order the coming reads follow (global sample indices), for ``predownload``;
            None: stored order. :meth:`epoch_order` sets it and publishes ``(seed, epoch)`` in the
            private folder, where DataLoader workers (forked or spawned, persistent or not) pick it
            up on their next read (:mod:`~loaderfactory.shards.published_order`).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        index: str | Sequence[ShardInfo] | None = None,
        keys: Collection[str] = (),
        fields: str = "item",
        metadata: bool = False,
        decode: Decode = True,
        image_size: int | Sequence[int] | None = None,
        image_mode: str | None = None,
        storage_options: dict[str, Any] | None = None,
        retries: int = 3,
        open_shards: int | None = None,
        shuffle_window: int | str = "auto",
        shuffle_memory: int = DEFAULT_SHUFFLE_MEMORY,
        shard_format: str = "auto",
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        predownload: int = 0,
        fetch: str = "whole",
        local_read_ahead: bool = True,
        progress: bool = True,
        transforms: Callable[..., Any] | Sequence[Callable[..., Any]] | None = None,
        seed: int | None = None,
    ) -> None:
        self.progress = progress
        decode = decoding(decode, image_size, image_mode)
        _check_arguments(open_shards, shuffle_window, predownload, fetch, cache_dir)
        self.transforms = None if transforms is None else SampleTransforms(transforms, seed)
        self.counters = ShardStats()  # every reading process adds to it: see stats()
        self.storage = Storage(storage_options, retries, stats=self.counters)
        self.shard_format, self.fetch = shard_format, fetch
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_limit, self.storage)
        found = on_rank_zero(lambda: self._find(urls, index, cache_dir), "reading the shards index")
        self.urls, self.shards, self.index_source, self._kept_index, self.items = found
        self.shape = SampleShape(self.items, fields, metadata, keys)
        if self.cache is not None:
            self.cache.expect(self.shards, check_reuse=self._kept_index[1] if self._kept_index else ())
            self.cache.evict_unversioned(info.url for info in self.shards)
        self.keys, self.decode = tuple(keys), decode
        self.shuffle_window_setting, self.shuffle_memory = shuffle_window, shuffle_memory
        self.shuffle_window = resolve_window(
            shuffle_window, [info.bytes for info in self.shards], shuffle_memory
        )
        self.open_shards_given = open_shards is not None
        self.open_shards = (
            max(DEFAULT_OPEN_SHARDS, self.shuffle_window) if open_shards is None else open_shards
        )
        self._ends = list(itertools.accumulate(info.samples for info in self.shards))
        self._open: OrderedDict[int, Shard] = OrderedDict()
        self._lock = threading.Lock()
        self.predownload = predownload
        self.visit_order: Sequence[int] | None = None
        self._visit_epoch: tuple[int, int] | None = None  # (seed, epoch) of visit_order
        self._predownloader: Predownloader | None = None
        self.local_read_ahead = local_read_ahead and read_ahead_supported()
        if self.local_read_ahead and job_spans_machines():
            log.info("local_read_ahead off: the job's ranks span machines, each reading part of each shard")
            self.local_read_ahead = False
        self._read_ahead: ReadAhead | None = None
        self._next: NextShard | None = None  # the next local shard, opened ahead with read-ahead
        self._last_opened, self._in_order = -2, 0  # shards opened in a row in stored order
        self._cache_limit, self.cache_is_private = cache_limit, cache_dir is None
        self._private: PrivateFolder | None = None
        self._published: PublishedOrder | None = None
        remote = fetch == "whole" and any(is_remote(info.url) for info in self.shards)
        if remote and (cache_dir is None or predownload):  # a cache to hold, or an order to publish
            self._set_up_private()
        try:
            self._check_cache_limit()
        except ValueError:
            if self._private is not None:
                self._private.remove()
            raise

    def _set_up_private(self) -> None:
        """The private folder: the cache without ``cache_dir``, and the published epoch order."""
        self._private = PrivateFolder()
        self._published = PublishedOrder(self._private.path)
        if self.cache_is_private:
            limit = self.default_cache_limit() if self._cache_limit is None else self._cache_limit
            # Past its own estimate, by shards held open in several workers: no surprise, so INFO.
            level = logging.INFO if self._cache_limit is None else logging.WARNING
            self.cache = ShardCache(self._private.path, limit, self.storage, level)
            self.cache.expect(self.shards)

    def default_cache_limit(self) -> int:
        """The private cache's bound: the largest remote shard times what may be held at once (the
        ``open_shards``, one being fetched, and the shards of ``predownload`` samples ahead)."""
        remote = [info for info in self.shards if is_remote(info.url)]
        largest = max((info.bytes for info in remote), default=0) or 1
        fewest = max(1, min((info.samples for info in remote), default=1))
        ahead = min(len(remote), max(THREADS, 1 + -(-self.predownload // fewest))) if self.predownload else 0
        return largest * (self.open_shards + 1 + ahead)

    def _check_cache_limit(self) -> None:
        """Refuse a cache limit below the largest remote shard before anything is fetched."""
        remote = [info for info in self.shards if is_remote(info.url)]
        if self.cache is not None and self.cache.limit is not None and remote:
            largest = max(remote, key=lambda info: info.bytes)
            self.cache.check_fits(largest.url, largest.bytes)

    @property
    def retried(self) -> int:
        """Remote reads retried after a transient error, in this process."""
        return self.storage.retried

    def stats(self) -> dict[str, Any]:
        """What reading this dataset cost so far, summed over this process and its DataLoader workers:
        shards opened, bytes read (remote and local), the time readers waited on storage, cache hits,
        fetches and evictions, retries (see :func:`loaderfactory.shards.stats.summarise`)."""
        return summarise(self.counters.totals(), self.cache is not None, len(self), len(self.shards))

    def _find(
        self, urls: str | Sequence[str], index: str | Sequence[ShardInfo] | None, cache_dir: str | None
    ) -> tuple[list[str], list[ShardInfo], str, KeptIndex | None, ItemLayout | None]:
        self.urls = expand_urls(urls, self.storage)
        if not self.urls:
            raise FileNotFoundError(f"{urls!r}: matched no shards")
        return self.urls, *self._index(index, cache_dir, urls)

    def _index(
        self, index: str | Sequence[ShardInfo] | None, cache_dir: str | None, listing: str | Sequence[str]
    ) -> tuple[list[ShardInfo], str, KeptIndex | None, ItemLayout | None]:
        """The shards' entries, where they came from (:attr:`index_source`), where they went
        through the index kept in ``cache_dir`` its path and the URLs whose entries it gave, and
        the items' layout the index records (written by ``pack``);
        ShardNotFoundError for a shard an index lists under the folder, prefix or glob ``listing``
        that is gone."""
        if index is None:
            found = find_shard_index(self.urls, self.storage, listing)
            if found is not None:
                return found.shards, index_url(self.urls), None, found.items
            if cache_dir is not None and any(is_remote(url) for url in self.urls):
                entries, source, saved = index_through_cache(
                    cache_dir, self.urls, self.storage, self._build_index, listing
                )
                return entries, source, (str(cached_index_path(cache_dir, self.urls)), saved), None
            log.info(
                "no index at %s: reading %d shard(s) once to count samples",
                index_url(self.urls),
                len(self.urls),
            )
            return self._build_index(self.urls), "built", None, None
        items = None
        if isinstance(index, str):
            read = read_index(index, self.storage)
            entries, items = read.shards, read.items
        else:
            entries = list(index)
        known = {info.url: info for info in entries}
        check_listing(listing, self.urls, list(known), index if isinstance(index, str) else "(given)")
        absent = [url for url in self.urls if url not in known]
        if absent:
            raise ShardError(
                f"index {index if isinstance(index, str) else '(given)'} lists no {absent[0]!r}"
                f" ({len(absent)} shard(s) missing); index the shards again"
            )
        source = index if isinstance(index, str) else "given"
        return [known[url] for url in self.urls], source, None, items

    def _build_index(self, urls: Sequence[str]) -> list[ShardInfo]:
        return build_index(urls, self.storage, self.progress, forced=self.shard_format)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def epoch_order(self, seed: int, epoch: int) -> list[int]:
        """The shuffled order of an epoch: shards permuted, samples mixed within ``shuffle_window``
        shards at a time (:func:`~loaderfactory.shards.order.window_order`); the order engine's
        ``OrderedDataset`` protocol, so ``shuffle: true`` on every kind follows it."""
        self.check_window()
        counts = [info.samples for info in self.shards]
        order: list[int] = window_order(counts, seed, epoch, self.shuffle_window).tolist()
        self.visit_order, self._visit_epoch = order, (seed, epoch)  # what predownload follows
        if self.transforms is not None:
            self.transforms.set_epoch(epoch, seed)
        if self._published is not None and self.predownload:  # before the epoch's first index is sent
            self._published.publish(seed, epoch)
        return order

    def set_epoch(self, epoch: int) -> None:
        """Number the epoch the transforms draw for (a shuffled epoch is numbered by its order)."""
        if self.transforms is not None:
            self.transforms.set_epoch(epoch)

    def window_problem(self) -> str | None:
        """Why a shuffled epoch could not hold its window: ``open_shards`` below it, or a set
        ``cache.limit`` below its remote shards' bytes; None when it can."""
        window = self.shuffle_window
        how = f"shuffle_window={window}" + (
            " (auto, from shuffle_memory)" if self.shuffle_window_setting == "auto" else ""
        )
        if self.open_shards < window:
            return (
                f"open_shards={self.open_shards} is below {how}: a shuffled epoch would reopen a shard"
                f" for nearly every sample; set open_shards ≥ {window} or leave it unset (it follows"
                f" the window), or set shuffle_window ≤ {self.open_shards}"
            )
        remote = [info.bytes for info in self.shards if is_remote(info.url)]
        held = window_bytes(remote, window)
        limit = None if self.cache is None else self.cache.limit
        if limit is not None and remote and limit < held:
            return (
                f"cache.limit {human_bytes(limit)} cannot hold {how}: its shards take up to"
                f" {human_bytes(held)}; raise cache.limit to {human_bytes(held)} or lower"
                " shuffle_memory / shuffle_window"
            )
        return None

    def check_window(self) -> None:
        """ValueError saying what to set when a shuffled epoch could not hold its window."""
        problem = self.window_problem()
        if problem is not None:
            raise ValueError(problem)

    def uniform_order_cost(self) -> str | None:
        """What a uniform shuffle costs beside :meth:`epoch_order` (for a wrapper that hides it);
        None: nothing, every shard staying open or one window spanning them all."""
        if len(self.shards) <= self.open_shards or self.shuffle_window >= len(self.shards):
            return None
        return (
            f"nearly every sample opens one of its {len(self.shards)} shards again"
            f" (open_shards={self.open_shards}) instead of each shard once an epoch"
        )

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, sample number inside it) of global sample ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range: the shards hold {len(self)} samples")
        shard = bisect.bisect_right(self._ends, index)
        return shard, index - (self._ends[shard - 1] if shard else 0)

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` (:meth:`read_sample`), transformed."""
        sample = self.read_sample(index)
        return sample if self.transforms is None else self.transforms.apply([sample], [index], len(self))[0]

    def read_sample(self, index: int) -> Any:
        """Sample ``index`` as read (the item as packed, or the raw sample), before ``transforms``."""
        position = index if index >= 0 else index + len(self)
        shard, local = self.locate(position)
        url = self.shards[shard].url
        try:
            sample = self._opened(shard, position).sample(local)
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

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``: a shard's runs read at once (:mod:`.batch_read`), transformed."""
        samples = read_batch(self, indices)
        return samples if self.transforms is None else self.transforms.apply(samples, indices, len(self))

    def _opened(self, number: int, position: int, first: int | None = None) -> Shard:
        """Shard ``number``, opened for reading samples ``first`` (default: ``position``) to
        ``position``, with ``predownload`` advanced (and read-ahead started, if it was not open).

        The first shard a process reads (none open yet, so none held) has the fetches ahead start
        before its own fetch, to run beside it instead of after it: they take the cache's room
        beside one shard, which is this one. Later shards are held first (the window's room is
        beside the shard in use, and it must not be evicted), then the window is looked at again.
        """
        if self.predownload and not self._open and self._must_fetch(number):
            self._predownload(position)
        new = number not in self._open
        opened = self._shard(number)
        if new and self.local_read_ahead and not is_remote(self.shards[number].url):
            self._read_ahead_of(number, position if first is None else first)
            self._in_order = self._in_order + 1 if number == self._last_opened + 1 else 0
            self._last_opened = number
            if self._in_order >= 2:  # two shards in a row in stored order: the next one comes next
                self._open_ahead(number + 1)
        if self.predownload:
            self._predownload(position)
        return opened

    def _index_again(self, url: str) -> str:
        """What to do about an index that no longer matches the shard ``url``; an index kept in the
        cache forgets the shard now, so that the next start indexes it anew."""
        if self._kept_index is not None:
            forget(self._kept_index[0], url, self.storage)
            return f"the cached index {self._kept_index[0]} forgot it: run again to index it anew"
        return "index it again"

    def _must_fetch(self, number: int) -> bool:
        url = self.shards[number].url
        return self.cache is not None and is_remote(url) and not self.cache.holds(url)

    def _shard(self, number: int) -> Shard:
        with self._lock:
            shard = self._open.get(number)
            if shard is not None:
                self._open.move_to_end(number)
                return shard
            # Close the least recently used first: a cached one then makes room for this one.
            while len(self._open) >= self.open_shards:
                self._open.popitem(last=False)[1].close()
            info = self.shards[number]
            ahead = self._next
            opened = None if ahead is None or ahead.pid != os.getpid() else ahead.take(number)
            if opened is None:
                try:
                    opened = self._open_shard(info)
                except ShardChangedError as err:
                    raise ShardChangedError(f"{err}: {self._index_again(info.url)}") from err
            if len(opened) != info.samples:
                opened.close()
                raise ShardError(
                    f"{info.url}: has {len(opened)} samples but the index says {info.samples};"
                    f" the shard changed since it was indexed: {self._index_again(info.url)}"
                )
            self._open[number] = opened
            self.storage.stats.opened(number)
            return opened

    def _open_shard(self, info: ShardInfo) -> Shard:
        """The shard of ``info``: from the cache when there is one and it is remote, else in place."""
        if self._private is not None and self._private.removed and self._private.owner == os.getpid():
            self._set_up_private()  # used again after close(): a new private folder
        if self.cache is None or not is_remote(info.url):
            return self._read_in_place(info, info.url)
        held = self.cache.hold(info.url)
        return CachedShard(held, info.url, lambda path: self._read_in_place(info, path))

    def _read_in_place(self, info: ShardInfo, path: str) -> Shard:
        """Shard ``info``, read from ``path`` (its URL, or its cached copy) in its format."""
        format_class = TarShard if info.format == "tar" else ParquetShard
        return format_class(self.storage, path, self.decode)

    def _predownload(self, index: int) -> None:
        """Fetch the shards of the samples after ``index`` in the background (``predownload``)."""
        with self._lock:
            loader = self._predownloader
            if loader is None or loader.pid != os.getpid():  # none yet, or the parent's in a fork
                if loader is not None:
                    loader.close()
                loader = self._predownloader = self._new_predownloader()
        if loader is not None:
            loader.advance(index, self._current_order())

    def _open_ahead(self, number: int) -> None:
        """Open local shard ``number``, the next in stored order, on a background thread
        (:mod:`.next_shard`)."""
        if number >= len(self.shards) or is_remote(self.shards[number].url):
            return
        with self._lock:
            ahead = self._next
            if ahead is None or ahead.pid != os.getpid():  # none yet, or the parent's in a fork
                if ahead is not None:
                    ahead.close()
                ahead = self._next = NextShard(self._open_local)
            if number in self._open:
                return
        ahead.want(number)

    def _open_local(self, number: int) -> Shard:
        info = self.shards[number]
        return self._read_in_place(info, info.url)

    def _read_ahead_of(self, number: int, position: int) -> None:
        """Read local shard ``number`` (just opened for sample ``position``) into the page cache
        ahead of its reads, and the next one when reads follow stored order (``local_read_ahead``)."""
        with self._lock:
            ahead = self._read_ahead
            if ahead is None or ahead.pid != os.getpid():  # none yet, or the parent's in a fork
                if ahead is not None:
                    ahead.close()
                info = get_worker_info()
                worker = None if info is None else (info.id, info.num_workers)
                paths = [split_scheme(shard.url)[1] for shard in self.shards]
                count = functools.partial(self.counters.add, "bytes_read_ahead")
                ahead = self._read_ahead = ReadAhead(paths, self._ends, count, worker)
        ahead.opened(number, position - (self._ends[number - 1] if number else 0))

    def _current_order(self) -> Sequence[int] | None:
        """``visit_order``, after taking up an epoch order published by another process."""
        published = None if self._published is None else self._published.read()
        if published is not None and published != self._visit_epoch:
            counts = [info.samples for info in self.shards]
            self.visit_order = window_order(counts, *published, self.shuffle_window).tolist()
            self._visit_epoch = published
        return self.visit_order

    def _new_predownloader(self) -> Predownloader | None:
        """A predownloader fetching as many shards ahead as fit beside the one in use, if any."""
        if self.cache is None:  # no remote shard, or fetch="range": nothing to fetch ahead
            self.predownload = 0
            return None
        largest = max(info.bytes for info in self.shards) or 1
        room = len(self.shards) if self.cache.limit is None else self.cache.limit // largest - 1
        if room < 1:
            self.predownload = 0
            log.info(
                "predownload off: cache.limit %s holds a single shard of %s",
                human_bytes(self.cache.limit or 0),
                human_bytes(largest),
            )
            return None
        urls = [info.url for info in self.shards]
        return Predownloader(self.cache, urls, self._ends, self.predownload, room)

    def close(self) -> None:
        """Close the open shards and stop the predownload and read-ahead threads; in the process that
        built the dataset, remove its private folder too. Used again, it reopens shards (in a new
        private folder)."""
        with self._lock:
            while self._open:
                self._open.popitem()[1].close()
            loader, self._predownloader = self._predownloader, None
            ahead, self._read_ahead = self._read_ahead, None
            following, self._next = self._next, None
        if loader is not None:
            loader.close()
        if ahead is not None:
            ahead.close()
        if following is not None:
            following.close()
        if self._private is not None:
            self._private.remove()
        if self.transforms is not None:
            self.transforms.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"], state["_lock"], state["_predownloader"] = OrderedDict(), None, None
        state["_read_ahead"] = state["_next"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _check_arguments(
    open_shards: int | None, shuffle_window: int | str, predownload: int, fetch: str, cache_dir: str | None
) -> None:
    """ValueError for an argument out of its range, or ``fetch="range"`` with a cache."""
    if open_shards is not None and open_shards < 1:
        raise ValueError(f"open_shards must be ≥ 1, got {open_shards}")
    resolve_window(shuffle_window, [], 1)  # "auto" or a count ≥ 1
    if predownload < 0:
        raise ValueError(f"predownload must be ≥ 0, got {predownload}")
    if fetch not in ("whole", "range"):
        raise ValueError(f"fetch must be 'whole' or 'range', got {fetch!r}")
    if fetch == "range" and (cache_dir is not None or predownload):
        raise ValueError(
            "fetch='range' reads remote shards by byte ranges, without a cache: set fetch='whole' to "
            "use cache_dir or predownload, or drop them"
        )
