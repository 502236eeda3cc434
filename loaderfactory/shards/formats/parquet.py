"""Parquet shards through pyarrow: a row is a sample, its columns are the sample's keys.

Opening a shard reads only its footer (row-group sizes). A sample reads its row group and keeps it
decoded while the shard is open (up to
:data:`~loaderfactory.shards.formats.row_groups_held.ROW_GROUPS_HELD_BYTES` of row groups a process, all of
its open shards together, least recently used dropped first), so a shuffled visit of a shard reads
each row group once instead of once a sample. Binary columns named like a file extension (``jpg``,
``npy``, ``image.png``) are decoded as tar fields are.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.formats.decode import Decode, decode_in_sample
from loaderfactory.shards.formats.row_groups_held import held_row_groups, new_shard_id
from loaderfactory.shards.storage.range_file import open_shard
from loaderfactory.shards.storage.store import Storage


def _parquet() -> Any:
    try:
        import pyarrow.parquet  # type: ignore[import-untyped]  # pyarrow ships no type stubs
    except ImportError as err:
        raise ImportError("Parquet shards need pyarrow: pip install pyarrow") from err
    return pyarrow.parquet


def _metadata(storage: Storage, url: str) -> Any:
    """The footer of the Parquet shard at ``url``; ShardError naming it when it is not Parquet."""
    import pyarrow

    with open_shard(storage, url) as file:
        try:
            return _parquet().ParquetFile(file).metadata
        except (pyarrow.ArrowException, OSError) as err:
            raise ShardError(
                f"{url}: not a readable Parquet file ({err}); is the shard truncated or corrupt?"
            ) from err


def count_parquet_rows(storage: Storage, url: str) -> int:
    """The number of rows (samples) of the Parquet shard at ``url``, from its footer."""
    rows: int = _metadata(storage, url).num_rows
    return rows


class ParquetShard:
    """One opened Parquet shard: row-group boundaries from the footer, rows decoded on demand.

    Holds the footer and no open file; the row groups decoded so far are held, as Arrow tables, in
    the process's :func:`~loaderfactory.shards.formats.row_groups_held.held_row_groups` (one budget for every
    open shard). A row group is read through a file opened for it, once while the shard stays open
    (again only after it was dropped to make room).
    """

    def __init__(self, storage: Storage, url: str, decode: Decode = True) -> None:
        self.storage, self.url, self.decode = storage, url, decode
        self._metadata = _metadata(storage, url)
        groups = [self._metadata.row_group(g) for g in range(self._metadata.num_row_groups)]
        self._starts: list[int] = [0, *itertools.accumulate(int(group.num_rows) for group in groups)]
        self._sizes = [max(1, int(group.total_byte_size)) for group in groups]
        self._id = new_shard_id()  # its row groups' key in the process's ledger
        self._lock = threading.Lock()  # threads reading the shard read a row group once

    def __len__(self) -> int:
        return self._starts[-1]

    def sample(self, index: int) -> dict[str, Any]:
        """Row ``index`` as ``{column: value}`` plus ``__key__`` (the row's number in the shard)."""
        group = bisect.bisect_right(self._starts, index) - 1
        with self._lock:
            table = self._group(group, index)
            row = {name: column[index - self._starts[group]].as_py() for name, column in table.items()}
        out: dict[str, Any] = {"__key__": str(index)}
        where = f"{self.url}: sample #{index}"
        for column, value in row.items():
            bytes_value = isinstance(value, bytes)
            out[column] = decode_in_sample(column, value, self.decode, where) if bytes_value else value
        return out

    def sample_run(self, first: int, count: int) -> list[dict[str, Any]]:
        """Rows ``first`` to ``first + count - 1``."""
        return [self.sample(index) for index in range(first, first + count)]

    def tar(self) -> None:
        """None: not a tar shard (see :class:`~loaderfactory.shards.read.cached_shard.Shard`)."""
        return None

    def _group(self, group: int, index: int) -> dict[str, Any]:
        """Row group ``group``'s columns, read now unless held (the lock held)."""
        ledger = held_row_groups()
        held = ledger.get((self._id, group))
        if held is not None:
            return held  # type: ignore[no-any-return]  # the columns stored below
        table = self._read_group(group, index)
        columns = dict(zip(table.column_names, table.columns, strict=True))
        ledger.put((self._id, group), columns, self._sizes[group])
        return columns

    def _read_group(self, group: int, index: int) -> Any:
        import pyarrow

        try:
            with open_shard(self.storage, self.url) as file:
                table = _parquet().ParquetFile(file, metadata=self._metadata).read_row_group(group)
        except (pyarrow.ArrowException, OSError) as err:
            raise ShardError(
                f"{self.url}: sample #{index} (row group {group}) is not readable ({err}); "
                "is the shard corrupt?"
            ) from err
        self.storage.stats.add("row_groups_read")
        return table

    def close(self) -> None:
        """Drop the row groups held of this shard."""
        with self._lock:
            held_row_groups().drop_shard(self._id)
