"""The decoded Parquet row groups a process keeps, all of its open shards together, within one budget.

One ledger a process, least recently used row group dropped first, whatever shard it is of; the row
group just read is always kept (a sample needs it), so the budget is exceeded by at most one row
group larger than it. Threads share the ledger; a forked worker starts with an empty one of its own
(the parent's tables would stay alive in it, copied, for nothing).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from typing import Any

ROW_GROUPS_HELD_BYTES = 256 * 2**20
"""The most bytes of decoded row groups (their uncompressed size in the footer) a process keeps over
all of its open Parquet shards: a whole shard at ``pack``'s default ``shard_size``."""

Key = tuple[int, int]
"""``(shard, row group)``: the shard as its :func:`new_shard_id`."""


class HeldRowGroups:
    """An LRU of decoded row groups with a byte budget, shared by the shards of a process.

    Args:
        limit: the budget in bytes; ``None``: :data:`ROW_GROUPS_HELD_BYTES` as it is at each store.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._groups: OrderedDict[Key, tuple[Any, int]] = OrderedDict()  # key -> (columns, bytes)
        self.held_bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Row groups held."""
        return len(self._groups)

    def get(self, key: Key) -> Any:
        """The columns held for ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._groups.get(key)
            if entry is None:
                return None
            self._groups.move_to_end(key)
            return entry[0]

    def put(self, key: Key, columns: Any, size: int) -> None:
        """Hold ``columns`` (``size`` bytes) for ``key``, dropping the least recently used row groups
        of any shard until it fits the budget (or it alone is left)."""
        limit = ROW_GROUPS_HELD_BYTES if self.limit is None else self.limit
        with self._lock:
            old = self._groups.pop(key, None)
            if old is not None:
                self.held_bytes -= old[1]
            while self._groups and self.held_bytes + size > limit:
                _, (_, dropped) = self._groups.popitem(last=False)
                self.held_bytes -= dropped
            self._groups[key] = (columns, size)
            self.held_bytes += size

    def drop_shard(self, shard: int) -> None:
        """Drop every row group of ``shard`` (closed)."""
        with self._lock:
            for key in [key for key in self._groups if key[0] == shard]:
                self.held_bytes -= self._groups.pop(key)[1]


_ids = itertools.count()
_ledger = [HeldRowGroups()]


def new_shard_id() -> int:
    """A number for an opened shard, never given to another in this process."""
    return next(_ids)


def held_row_groups() -> HeldRowGroups:
    """This process's ledger."""
    return _ledger[0]


def _forked() -> None:
    _ledger[0] = HeldRowGroups()


os.register_at_fork(after_in_child=_forked)
