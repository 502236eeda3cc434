"""Builder of the ``shards`` dataset and the ``run.mode=index`` job."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_transforms
from loaderfactory.config.specs.shards import ShardsDatasetSpec
from loaderfactory.errors import ArgumentError, ConfigError, ConfigProblem
from loaderfactory.shards import (
    ShardInfo,
    ShardsDataset,
    Storage,
    build_index,
    expand_urls,
    index_url,
    save_index,
)
from loaderfactory.shards.errors import CacheError, CacheLimitError, ShardError, StorageError
from loaderfactory.shards.formats.item_layout import ItemLayout
from loaderfactory.shards.index.shard_index import read_index


def build_shards(spec: ShardsDatasetSpec, upstream: None, context: BuildContext) -> ShardsDataset:
    """A :class:`ShardsDataset` from the spec; a missing shard or index is reported at its field."""
    extra: dict[str, Any] = {}  # the cache's arguments, passed only when set
    if spec.cache is not None:
        extra.update(cache_dir=spec.cache.dir, cache_limit=spec.cache.limit)
    if spec.predownload:
        extra["predownload"] = spec.predownload
    # Built outside the `try`: a transform's own ConfigError is a ValueError too, and keeps its path.
    transforms = build_transforms(spec.transforms, "dataset.transforms")
    try:
        return ShardsDataset(
            spec.urls,
            index=spec.index,
            keys=spec.keys,
            fields=spec.fields,
            metadata=spec.metadata,
            decode=spec.decode,
            image_size=spec.image_size,
            image_mode=spec.image_mode,
            storage_options=spec.storage_options,
            retries=spec.retries,
            open_shards=spec.open_shards,
            shuffle_window=spec.shuffle_window,
            shuffle_memory=spec.shuffle_memory,
            shard_format=spec.format,
            fetch=spec.fetch,
            local_read_ahead=spec.local_read_ahead,
            progress=context.progress,
            transforms=transforms,
            seed=context.seed,
            **extra,
        )
    except FileNotFoundError as err:
        field = "dataset.index" if spec.index is not None and spec.index in str(err) else "dataset.urls"
        raise ConfigError(ConfigProblem(field, f"{err}; check the URL (and the bucket)")) from err
    except ImportError as err:  # the storage names the scheme's extra
        raise ConfigError(ConfigProblem("dataset.urls", str(err))) from err
    except CacheError as err:  # a cache folder that cannot be written
        raise ConfigError(ConfigProblem("dataset.cache.dir", str(err))) from err
    except CacheLimitError as err:
        raise ConfigError(ConfigProblem("dataset.cache.limit", str(err))) from err
    except ArgumentError as err:  # metadata or keys that the packed items' layout cannot give
        raise ConfigError(ConfigProblem(f"dataset.{err.argument}", str(err))) from err
    except (ValueError, StorageError) as err:  # a brace pattern, a stale index, storage that keeps failing
        raise ConfigError(ConfigProblem("dataset", str(err))) from err


def index_shards(spec: ShardsDatasetSpec, progress: bool = True) -> tuple[str, list[ShardInfo]]:
    """``run.mode=index``: read every shard once (a progress bar on stderr) and write their index.

    Written to ``spec.index``, else ``loaderfactory-shards.json`` in the shards' folder. The items'
    layout an index already there records (shards written by ``pack``, indexed again where they
    were copied) is kept, so the items still read back as packed. Returns where it was written
    and the shards it lists.
    """
    storage = Storage(spec.storage_options, spec.retries)
    try:
        urls = expand_urls(spec.urls, storage)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(ConfigProblem("dataset.urls", str(err))) from err
    shards = build_index(urls, storage, progress=progress, forced=spec.format)
    where = spec.index or index_url(urls)
    save_index(shards, where, storage, _recorded_items(where, storage))
    return where, shards


def _recorded_items(url: str, storage: Storage) -> ItemLayout | None:
    """The items' layout the index at ``url`` records; None without one (or without an index)."""
    try:
        return read_index(url, storage).items
    except (FileNotFoundError, ShardError):
        return None
