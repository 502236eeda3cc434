"""Parquet shards through pyarrow: a row is a sample, its columns are the sample's keys.

Opening a shard reads only its footer (row-group sizes); a sample reads its row group once and keeps
the last one decoded, so consecutive samples cost a list lookup. Binary columns named like a file
extension (``jpg``, ``npy``, ``image.png``) are decoded as tar fields are.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any

from loaderfactory.shards.decode import Decode, decode_in_sample
from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.range_file import open_shard
from loaderfactory.shards.storage import Storage


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

    Holds the footer and the last row group decoded (one row group of memory), no open file: a row
    group is read through a file opened for it (once per row group, as samples run in order).
    """

    def __init__(self, storage: Storage, url: str, decode: Decode = True) -> None:
        self.storage, self.url, self.decode = storage, url, decode
        self._metadata = _metadata(storage, url)
        sizes: list[int] = [
            self._metadata.row_group(g).num_rows for g in range(self._metadata.num_row_groups)
        ]
        self._starts = [0, *itertools.accumulate(sizes)]
        self._group: tuple[int, list[dict[str, Any]]] = (-1, [])
        self._lock = threading.Lock()  # threads share the cached row group

    def __len__(self) -> int:
        return self._starts[-1]

    def sample(self, index: int) -> dict[str, Any]:
        """Row ``index`` as ``{column: value}`` plus ``__key__`` (the row's number in the shard)."""
        group = bisect.bisect_right(self._starts, index) - 1
        with self._lock:
            if self._group[0] != group:
                self._group = (group, self._read_group(group, index))
            row = self._group[1][index - self._starts[group]]
        out: dict[str, Any] = {"__key__": str(index)}
        where = f"{self.url}: sample #{index}"
        for column, value in row.items():
            bytes_value = isinstance(value, bytes)
            out[column] = decode_in_sample(column, value, self.decode, where) if bytes_value else value
        return out

    def _read_group(self, group: int, index: int) -> list[dict[str, Any]]:
        import pyarrow

        try:
            with open_shard(self.storage, self.url) as file:
                table = _parquet().ParquetFile(file, metadata=self._metadata).read_row_group(group)
            rows: list[dict[str, Any]] = table.to_pylist()
        except (pyarrow.ArrowException, OSError) as err:
            raise ShardError(
                f"{self.url}: sample #{index} (row group {group}) is not readable ({err}); "
                "is the shard corrupt?"
            ) from err
        return rows

    def close(self) -> None:
        """Drop the cached row group."""
        self._group = (-1, [])
