"""A shard opened from its cached copy: held against eviction while open, errors naming its URL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from loaderfactory.shards.cache_files import HeldShard
from loaderfactory.shards.errors import ShardError


class Shard(Protocol):
    """An opened shard: its sample count and its samples by local index."""

    def __len__(self) -> int: ...

    def sample(self, index: int) -> dict[str, Any]: ...

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
            run = getattr(self.shard, "sample_run", None)
            if run is not None:
                samples: list[dict[str, Any]] = run(first, count)
                return samples
            return [self.shard.sample(index) for index in range(first, first + count)]
        except ShardError as err:
            raise self._named(err) from err

    def close(self) -> None:
        self.shard.close()
        self.held.close()

    def _named(self, err: ShardError) -> ShardError:
        return ShardError(str(err).replace(self.held.path, f"{self.url} (cached as {self.held.path})"))
