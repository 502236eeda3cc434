"""Parquet shards through pyarrow: a row is a sample, its columns are the sample's keys.

Opening a shard reads only its footer (row-group sizes); a sample reads its row group once and keeps
the last one decoded, so consecutive samples cost a list lookup. Binary columns named like a file
extension (``jpg``, ``npy``, ``image.png``) are decoded as tar fields are.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any, BinaryIO

from loaderfactory.shards.decode import Decode, decode_field
from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.range_file import open_shard
from loaderfactory.shards.storage import Storage


def _parquet() -> Any:
    try:
        import pyarrow.parquet  # type: ignore[import-untyped]  # pyarrow ships no type stubs
    except ImportError as err:
        raise ImportError("Parquet shards need pyarrow: pip install pyarrow") from err
    return pyarrow.parquet


def _open(storage: Storage, url: str) -> tuple[BinaryIO, Any]:
    """The open file and its pyarrow ``ParquetFile``; ShardError naming ``url`` when it is not Parquet."""
    import pyarrow

    file = open_shard(storage, url)
    try:
        return file, _parquet().ParquetFile(file)
    except (pyarrow.ArrowException, OSError) as err:
        file.close()
        raise ShardError(
            f"{url}: not a readable Parquet file ({err}); is the shard truncated or corrupt?"
        ) from err


def count_parquet_rows(storage: Storage, url: str) -> int:
    """The number of rows (samples) of the Parquet shard at ``url``, from its footer."""
    file, parquet = _open(storage, url)
    with file:
        rows: int = parquet.metadata.num_rows
        return rows


class ParquetShard:
    """One opened Parquet shard: row-group boundaries from the footer, rows decoded on demand.

    Holds the file open and the last row group decoded (one row group of memory); ``close()`` frees both.
    """

    def __init__(self, storage: Storage, url: str, decode: Decode = True) -> None:
        self.url, self.decode = url, decode
        self._file, self._parquet = _open(storage, url)
        sizes: list[int] = [
            self._parquet.metadata.row_group(g).num_rows for g in range(self._parquet.num_row_groups)
        ]
        self._starts = [0, *itertools.accumulate(sizes)]
        self._group: tuple[int, list[dict[str, Any]]] = (-1, [])
        self._lock = threading.Lock()  # one file position: threads take turns reading row groups

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
        for column, value in row.items():
            out[column] = decode_field(column, value, self.decode) if isinstance(value, bytes) else value
        return out

    def _read_group(self, group: int, index: int) -> list[dict[str, Any]]:
        import pyarrow

        try:
            rows: list[dict[str, Any]] = self._parquet.read_row_group(group).to_pylist()
        except (pyarrow.ArrowException, OSError) as err:
            raise ShardError(
                f"{self.url}: sample #{index} (row group {group}) is not readable ({err}); "
                "is the shard corrupt?"
            ) from err
        return rows

    def close(self) -> None:
        """Close the file and drop the cached row group."""
        self._group = (-1, [])
        self._file.close()
