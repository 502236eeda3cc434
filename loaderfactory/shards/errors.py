"""Exceptions of the shards reader, each naming the URL (and the sample) it is about, and of ``pack``,
naming the item."""

from __future__ import annotations

from loaderfactory.errors import LoaderFactoryError


class ShardError(LoaderFactoryError, ValueError):
    """A shard whose content cannot be read as its format: a truncated tar, a corrupt Parquet file,
    a sample missing a key, an index that does not fit the shards."""


class ShardChangedError(ShardError):
    """A shard the store now holds in another version than its index says (another size or ETag):
    replaced since it was indexed."""


class PackError(LoaderFactoryError, ValueError):
    """An item that cannot be written as a shard sample; the message names the item and the field."""


class StorageError(LoaderFactoryError, OSError):
    """Storage that kept failing after the retries (a server that went away, a network outage)."""


class CacheError(LoaderFactoryError, OSError):
    """A shards cache that cannot work: a folder that is not writable, a full disk, shards evicted
    before they could be read."""


class CacheLimitError(LoaderFactoryError, ValueError):
    """A ``cache.limit`` that cannot work: not above 0 bytes, or smaller than a shard."""


class ShardNotFoundError(LoaderFactoryError, FileNotFoundError):
    """A shard or object that is not there: a ``FileNotFoundError`` whose file name is its URL."""


READ_ERRORS = (ShardError, StorageError, CacheError, ShardNotFoundError)
"""What reading a sample of a shard raises on purpose: each names the shard's URL, and the sample
once it went through :class:`~loaderfactory.shards.dataset.ShardsDataset`."""


def in_sample(err: Exception, where: str) -> Exception:
    """``err`` again, of its own type, its message followed by ``where`` (the sample being read).

    The type is kept so that ``except`` clauses (and torch, which re-raises a worker's error by its
    type) see the same error; ``FileNotFoundError`` keeps its errno and file name.
    """
    if isinstance(err, OSError) and err.filename is not None:
        return type(err)(err.errno, f"{err.strerror}; {where}", err.filename)
    return type(err)(f"{err}; {where}")


def changed_during_fetch(url: str, told: int, expected: int) -> StorageError:
    """The error of a fetch whose answer says the object at ``url`` has ``told`` bytes where the
    store said ``expected`` just before: it was replaced between the two requests."""
    return StorageError(
        f"{url}: the answer says the object has {told} bytes where {expected} were expected; it "
        "changed during the fetch, and nothing was cached: run again once it is no longer being written"
    )
