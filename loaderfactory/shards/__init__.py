"""Read sharded data (webdataset tar, Parquet) from local disk or object storage, by sample index."""

from __future__ import annotations

from loaderfactory.shards.dataset import ShardsDataset
from loaderfactory.shards.errors import (
    CacheError,
    CacheLimitError,
    ShardChangedError,
    ShardError,
    ShardNotFoundError,
    StorageError,
)
from loaderfactory.shards.index.shard_index import (
    INDEX_FORMAT,
    INDEX_NAME,
    ShardInfo,
    build_index,
    find_index,
    index_url,
    load_index,
    save_index,
)
from loaderfactory.shards.storage.cache import ShardCache
from loaderfactory.shards.storage.store import Storage
from loaderfactory.shards.storage.urls import expand_braces, expand_urls
from loaderfactory.shards.write.encode import PackError
from loaderfactory.shards.write.pack import PackResult, pack

__all__ = [
    "INDEX_FORMAT",
    "INDEX_NAME",
    "CacheError",
    "CacheLimitError",
    "PackError",
    "PackResult",
    "ShardCache",
    "ShardChangedError",
    "ShardError",
    "ShardInfo",
    "ShardNotFoundError",
    "ShardsDataset",
    "Storage",
    "StorageError",
    "build_index",
    "expand_braces",
    "expand_urls",
    "find_index",
    "index_url",
    "load_index",
    "pack",
    "save_index",
]
