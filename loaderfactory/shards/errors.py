"""Exceptions of the shards reader: each names the URL (and the sample) it is about."""

from __future__ import annotations

from loaderfactory.errors import LoaderFactoryError


class ShardError(LoaderFactoryError, ValueError):
    """A shard whose content cannot be read as its format: a truncated tar, a corrupt Parquet file,
    a sample missing a key, an index that does not fit the shards."""


class StorageError(LoaderFactoryError, OSError):
    """Storage that kept failing after the retries (a server that went away, a network outage)."""


class CacheError(LoaderFactoryError, OSError):
    """A shards cache that cannot work: a folder that is not writable, a full disk, shards evicted
    before they could be read."""
