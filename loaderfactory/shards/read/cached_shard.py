"""A shard opened from its cached copy: held against eviction while open, errors naming its URL."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.storage.cache_files import HeldShard

if TYPE_CHECKING:
    from loaderfactory.shards.formats.tar.shard import TarShard


class Shard(Protocol):
    """An opened shard: its sample count and its samples by local index."""

    def __len__(self) -> int: ...

    def sample(self, index: int) -> dict[str, Any]: ...

    def sample_run(self, first: int, count: int) -> list[dict[str, Any]]:
        """Samples ``first`` to ``first + count - 1`` (at once where the format reads runs)."""
        ...

    def tar(self) -> TarShard | None:
        """The tar shard read underneath (a cached copy's, or this one), whose file batch reads go
        to directly; None for another format."""
        ...

    def close(self) -> None: ...


class CachedShard:
    """``opener(path)`` over the cached copy ``held``; closing it lets the cache evict the copy.

    Errors of the format readers name the local path; these name the shard's URL, then the path.
    """

    def __init__(self, held: HeldShard, url: str, opener: Callable[[str], Shard]) -> None:
        self.held, self.url = held, url
        try:
            self.shard = opener(held.path)
        except ShardError as err:
            held.close()
            raise self._named(err) from err

    def __len__(self) -> int:
        return len(self.shard)

    def sample(self, index: int) -> dict[str, Any]:
        try:
            return self.shard.sample(index)
        except ShardError as err:
            raise self._named(err) from err

    def sample_run(self, first: int, count: int) -> list[dict[str, Any]]:
        """Samples ``first`` to ``first + count - 1``: at once when the format reads runs."""
        try:
            return self.shard.sample_run(first, count)
        except ShardError as err:
            raise self._named(err) from err

    def tar(self) -> TarShard | None:
        """The cached copy's tar shard; None for another format."""
        return self.shard.tar()

    def close(self) -> None:
        self.shard.close()
        self.held.close()

    def _named(self, err: ShardError) -> ShardError:
        return ShardError(str(err).replace(self.held.path, f"{self.url} (cached as {self.held.path})"))
