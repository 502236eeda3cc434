"""``ShardsDataset``: a map-style dataset over webdataset tar and Parquet shards, local or remote."""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from torch.utils.data import Dataset, get_worker_info

from loaderfactory.components.epoch_announce import EpochTag, reading_tag
from loaderfactory.shards.dataset_settings import (
    check_arguments,
    check_cache_limit,
    private_cache_limit,
    read_ahead_setting,
)
from loaderfactory.shards.formats.decode import Decode, decoding
from loaderfactory.shards.formats.item_layout import SampleShape
from loaderfactory.shards.index.broadcast import on_rank_zero
from loaderfactory.shards.index.cached import forget
from loaderfactory.shards.index.found_shards import find_shards
from loaderfactory.shards.index.shard_index import ShardInfo
from loaderfactory.shards.order import window_order
from loaderfactory.shards.read.reader import ShardReader
from loaderfactory.shards.read.transforms import SampleTransforms
from loaderfactory.shards.shuffle_window import (
    DEFAULT_OPEN_SHARDS,
    DEFAULT_SHUFFLE_MEMORY,
    resolve_window,
    uniform_order_cost,
    window_problem,
)
from loaderfactory.shards.stats import ShardStats, summarise
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.private_folder import PrivateFolder
from loaderfactory.shards.storage.store import Storage, is_remote


class ShardsDataset(Dataset[dict[str, Any]]):
    """Samples of tar or Parquet shards by global index; ``len()`` comes from the index alone.

    Sample ``i`` is found by a bisect over the shards' cumulative sample counts; its shard is opened
    on first use (tar headers or the Parquet footer only) and kept among the ``open_shards`` most
    recently used. Shards written by ``pack`` give back each item as it was packed (a dict with its
    keys, a tuple, a list or the single value; numpy arrays come back as tensors), their index
    recording how (:mod:`.formats.item_layout`); other shards, or ``fields="raw"``, give the webdataset
    sample: a dict of its decoded fields by stored name (``image.npy``) plus ``__key__`` and
    ``__url__``. Each process reads through a :class:`~loaderfactory.shards.read.reader.ShardReader` of
    its own (:meth:`reader`: the open shards and background reads); a pickle carries none. Under
    an initialised ``torch.distributed`` group only rank 0 lists the shards and reads (or builds)
    the index, and broadcasts them to the other ranks.

    Args:
        urls: a list, a brace pattern, a folder or prefix ending in ``/``, or a local glob
            (see :func:`loaderfactory.shards.storage.urls.expand_urls`).
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
            JPEGs decode scaled down by libjpeg first (:mod:`.formats.media`). None: as stored.
        image_mode: decoded images in this mode: ``"RGB"`` (3 channels), ``"L"`` (1), ``"RGBA"``
            (4); None: as stored.
        storage_options: settings for remote storage (``endpoint_url``, ``key``, ``secret``, ...).
        retries: retries of a failing remote read, with backoff.
        open_shards: how many shards stay open (open Parquet shards keep the row groups they read,
            up to 256 MiB a process for all of them:
            :data:`~loaderfactory.shards.formats.row_groups_held.ROW_GROUPS_HELD_BYTES`); None: the
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
            :mod:`~loaderfactory.shards.storage.private_folder`). Local shards are always read in place.
            See :class:`ShardCache`. Remote shards with no index beside them have the index built
            here kept in ``cache_dir`` for the next start (:mod:`loaderfactory.shards.index.cached`).
        cache_limit: the most bytes of shards the cache keeps (least recently used evicted first,
            never a shard open anywhere on the machine); None: no bound with ``cache_dir``, and
            for the private folder what open shards and predownload need
            (:meth:`default_cache_limit`).
        predownload: how many samples ahead to fetch the shards of, on background threads (the
            rule is in :mod:`loaderfactory.shards.read.predownload`).
        fetch: ``"whole"``: a remote shard is fetched whole into the cache once per process tree
            (once per machine with a shared ``cache_dir``) and read locally by every worker.
            ``"range"``: each read is a byte-range request and nothing is cached (every worker walks
            the tar headers itself); only for sparse reads of shards too large to fetch.
        local_read_ahead: read each local shard opened into the OS page cache on a background thread,
            and the next one when shards are read in stored order (:mod:`.read.read_ahead`); off where
            the job's ranks span machines.
        progress: show a progress bar on stderr while indexing shards that have no index.
        transforms: applied to each sample after it is read, where it is read: ``f(item, generator)``
            or ``f(item)``, or a list of them in order (:mod:`loaderfactory.shards.read.transforms`).
        seed: seeds the transforms' draws, with the epoch and the index; None: the shuffle's seed.

    Attributes:
        shuffle_window: the window in shards (``"auto"`` resolved from the index).
        shuffle_window_setting: the ``shuffle_window`` argument as given (``"auto"`` or a count).
        cache_is_private: True when remote shards go to the private temporary folder (no ``cache_dir``).
        index_source: where the index came from: its URL, ``"given"``, the index kept in
            ``cache_dir`` (:mod:`.index.cached`), or ``"built"`` (no index beside the shards: each
            was read once to count its samples).
        epoch_tag: the epoch being read: ``(seed, epoch, shuffled)``, set by :meth:`epoch_order` and
            :meth:`set_epoch`; in a DataLoader worker, by the epoch its batches announce
            (:mod:`~loaderfactory.components.epoch_announce`). Predownload follows its order, and the
            transforms draw for it. None: none numbered yet (stored order, epoch 0).
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
        check_arguments(open_shards, shuffle_window, predownload, fetch, cache_dir)
        self.transforms = None if transforms is None else SampleTransforms(transforms, seed)
        self.counters = ShardStats()  # every reading process adds to it: see stats()
        self.storage = Storage(storage_options, retries, stats=self.counters)
        self.shard_format, self.fetch = shard_format, fetch
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_limit, self.storage)
        found = on_rank_zero(
            lambda: find_shards(urls, index, cache_dir, self.storage, progress, shard_format),
            "reading the shards index",
        )
        self.urls, self.shards, self.index_source, self._kept_index, self.items = found
        self.shape = SampleShape(self.items, fields, metadata, keys)
        if self.cache is not None:
            self.cache.expect(self.shards, check_reuse=self._kept_index[1] if self._kept_index else ())
            self.cache.evict_unversioned(info.url for info in self.shards)
        self.keys, self.decode = tuple(keys), decode
        self.shuffle_window_setting, self.shuffle_memory = shuffle_window, shuffle_memory
        sizes = [info.bytes for info in self.shards]
        window = self.shuffle_window = resolve_window(shuffle_window, sizes, shuffle_memory)
        self.open_shards_given = open_shards is not None
        self.open_shards = max(DEFAULT_OPEN_SHARDS, window) if open_shards is None else open_shards
        self.ends = list(itertools.accumulate(info.samples for info in self.shards))
        self.predownload = predownload
        self.epoch_tag: EpochTag | None = None
        self._set_up_reads(local_read_ahead, cache_limit, cache_dir)

    def _set_up_reads(self, local_read_ahead: bool, cache_limit: int | None, cache_dir: str | None) -> None:
        """Read-ahead on unless the job spans machines; the private cache where remote shards need one;
        no reader yet (:meth:`reader`). ValueError for a cache limit below the largest remote shard."""
        self.local_read_ahead = read_ahead_setting(local_read_ahead)
        self._reader: ShardReader | None = None
        self._reader_lock = threading.Lock()
        self._cache_limit, self.cache_is_private = cache_limit, cache_dir is None
        self._private: PrivateFolder | None = None
        if self.fetch == "whole" and self.cache_is_private and any(is_remote(i.url) for i in self.shards):
            self._set_up_private()
        try:
            check_cache_limit(self.cache, self.shards)
        except ValueError:
            if self._private is not None:
                self._private.remove()
            raise

    def _set_up_private(self) -> None:
        """The private folder, and the cache in it (no ``cache_dir``)."""
        self._private = PrivateFolder()
        limit = self.default_cache_limit() if self._cache_limit is None else self._cache_limit
        # Past its own estimate, by shards held open in several workers: no surprise, so INFO.
        level = logging.INFO if self._cache_limit is None else logging.WARNING
        self.cache = ShardCache(self._private.path, limit, self.storage, level)
        self.cache.expect(self.shards)

    def default_cache_limit(self) -> int:
        """The private cache's bound: the largest remote shard times what may be held at once (the
        ``open_shards``, one being fetched, and the shards of ``predownload`` samples ahead)."""
        return private_cache_limit(self.shards, self.open_shards, self.predownload)

    @property
    def retried(self) -> int:
        """Remote reads retried after a transient error, in this process."""
        return self.storage.retried

    def stats(self) -> dict[str, Any]:
        """What reading this dataset cost so far, summed over this process and its DataLoader workers:
        shards opened, bytes read (remote and local), the time readers waited on storage, cache hits,
        fetches and evictions, retries (see :func:`loaderfactory.shards.stats.summarise`)."""
        return summarise(self.counters.totals(), self.cache is not None, len(self), len(self.shards))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def epoch_order(self, seed: int, epoch: int) -> list[int]:
        """The shuffled order of an epoch: shards permuted, samples mixed within ``shuffle_window``
        shards at a time (:func:`~loaderfactory.shards.order.window_order`); the order engine's
        ``OrderedDataset`` protocol, so ``shuffle: true`` on every kind follows it."""
        self.check_window()
        counts = [info.samples for info in self.shards]
        order: list[int] = window_order(counts, seed, epoch, self.shuffle_window).tolist()
        self._read_epoch(EpochTag(seed, epoch, True), order)
        return order

    def set_epoch(self, epoch: int) -> None:
        """Number the epoch read in stored order (the transforms draw for it)."""
        seed = self.epoch_tag.seed if self.epoch_tag is not None else 0
        self._read_epoch(EpochTag(seed, epoch, False))

    def _read_epoch(self, tag: EpochTag, order: list[int] | None = None) -> None:
        """Read epoch ``tag`` from the next read on: predownload follows its order (``order`` when
        computed already), the transforms draw for it."""
        self.epoch_tag = tag
        if self.transforms is not None:
            self.transforms.set_epoch(tag.epoch, tag.seed if tag.shuffled else None)
        reader = self._own_reader()
        if reader is not None and order is not None:
            reader.follow(tag, order)

    def window_problem(self) -> str | None:
        """Why a shuffled epoch could not hold its window: ``open_shards`` below it, or a set
        ``cache.limit`` below its remote shards' bytes; None when it can."""
        remote = [info.bytes for info in self.shards if is_remote(info.url)]
        limit = None if self.cache is None else self.cache.limit
        window, setting = self.shuffle_window, self.shuffle_window_setting
        return window_problem(window, setting, self.open_shards, remote, limit)

    def check_window(self) -> None:
        """ValueError saying what to set when a shuffled epoch could not hold its window."""
        problem = self.window_problem()
        if problem is not None:
            raise ValueError(problem)

    def uniform_order_cost(self) -> str | None:
        """What a uniform shuffle costs beside :meth:`epoch_order` (for a wrapper that hides it);
        None: nothing, every shard staying open or one window spanning them all."""
        return uniform_order_cost(len(self.shards), self.open_shards, self.shuffle_window)

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, sample number inside it) of global sample ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range: the shards hold {len(self)} samples")
        shard = bisect.bisect_right(self.ends, index)
        return shard, index - (self.ends[shard - 1] if shard else 0)

    def reader(self) -> ShardReader:
        """This process's reader of the dataset, made on first use here (a forked copy of the
        parent's is replaced, taking over its open shards)."""
        reader = self._own_reader()
        if reader is None:
            with self._reader_lock:
                reader = self._own_reader()
                if reader is None:
                    inherited, reader = self._reader, ShardReader(self)
                    if inherited is not None:
                        reader.adopt(inherited)
                    self._reader = reader
        return reader

    def _own_reader(self) -> ShardReader | None:
        """The reader made in this process; None before its first read (a reader copied by a fork
        belongs to the parent)."""
        reader = self._reader
        return reader if reader is not None and reader.pid == os.getpid() else None

    def _reading(self) -> ShardReader:
        """The reader, after taking up the epoch announced to this DataLoader worker (or told by a
        mixture reading this dataset), if it changed."""
        tag = reading_tag(in_worker=get_worker_info() is not None)
        if tag is not None and tag != self.epoch_tag:
            self._read_epoch(tag)
        return self.reader()

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` (:meth:`read_sample`), transformed."""
        sample = self._reading().read_sample(index)
        return sample if self.transforms is None else self.transforms.apply([sample], [index], len(self))[0]

    def read_sample(self, index: int) -> Any:
        """Sample ``index`` as read (the item as packed, or the raw sample), before ``transforms``."""
        return self._reading().read_sample(index)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``: a shard's runs read at once (:mod:`.read.batch`), transformed."""
        samples = self._reading().read_batch(indices)
        return samples if self.transforms is None else self.transforms.apply(samples, indices, len(self))

    def shard_cache(self) -> ShardCache | None:
        """The cache remote shards are fetched into (a new private folder when used again after
        :meth:`close` in the process that built the dataset); None: read in place."""
        if self._private is not None and self._private.removed:
            self._set_up_private()
        return self.cache

    def index_again(self, url: str) -> str:
        """What to do about an index that no longer matches the shard ``url``; an index kept in the
        cache forgets the shard now, so that the next start indexes it anew."""
        if self._kept_index is not None:
            forget(self._kept_index[0], url, self.storage)
            return f"the cached index {self._kept_index[0]} forgot it: run again to index it anew"
        return "index it again"

    def close(self) -> None:
        """Close this process's reader (its open shards, predownload and read-ahead threads); in the
        process that built the dataset, remove its private folder too. Used again, it reopens shards
        (in a new private folder)."""
        reader = self._own_reader()  # a forked copy of the parent's stays referenced, untouched
        if reader is not None:
            self._reader = None
            reader.close()
        if self._private is not None:
            self._private.remove()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = state["_reader_lock"] = None  # a copy reads through a reader of its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reader_lock = threading.Lock()
