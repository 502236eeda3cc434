"""Build one shard's bytes in memory from encoded samples: a webdataset tar, or a Parquet file.

A builder knows the size a sample adds, so the packer cuts shards at ``shard_size``: a tar's size is
exact (a 512-byte header per member, data padded to 512 bytes, a 1 KiB end marker); a Parquet
file's is known once written, so :meth:`ParquetShardBuilder.finish` writes it again with fewer rows
when it came out larger and hands the rest back for the next shard.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from typing import Any, Protocol

from loaderfactory.shards.formats.decode import extension
from loaderfactory.shards.formats.tar.table import TarTable
from loaderfactory.shards.write.encode import Fields, PackError

Sample = tuple[str, Fields]
"""A sample as the packer has it: its ``__key__`` and its encoded fields."""
_BLOCK = 512
_TAR_END = 2 * _BLOCK
_ROW_GROUP_BYTES = 8 * 2**20
"""About this many bytes per Parquet row group: the reader holds one decoded row group per open shard."""


class ShardBuilder(Protocol):
    """One shard being filled: its samples, its size so far, and its bytes when finished."""

    samples: int
    size: int
    same_fields: bool
    """Whether every sample must have the same fields (Parquet's columns)."""

    def added_size(self, sample: Sample) -> int: ...

    def add(self, sample: Sample) -> None: ...

    def finish(self, limit: int) -> tuple[bytes, list[Sample]]: ...


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0  # no clock in the bytes: packing is reproducible
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


class TarShardBuilder:
    """A webdataset tar: for each sample, one member ``<key>.<field>`` per field, in order."""

    suffix = ".tar"
    same_fields = False

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self.samples, self.size = 0, _TAR_END
        self.members = TarTable()
        """Each member's key, field, and where its data lies: what a scan of the shard finds."""

    def added_size(self, sample: Sample) -> int:
        key, fields = sample
        return sum(len(_tar_header(f"{key}.{f}", len(d))) + _padded(len(d)) for f, d in fields.items())

    def add(self, sample: Sample) -> None:
        key, fields = sample
        for field, data in fields.items():
            header = _tar_header(f"{key}.{field}", len(data))
            padding = b"\0" * (_padded(len(data)) - len(data))
            self._chunks += [header, data, padding]
            self.members.add(key, field, self.size - _TAR_END + len(header), len(data))
            self.size += len(header) + len(data) + len(padding)
        self.samples += 1

    def finish(self, limit: int) -> tuple[bytes, list[Sample]]:
        """The tar's bytes (always every sample: the sizes were exact)."""
        return b"".join([*self._chunks, b"\0" * _TAR_END]), []


class ParquetShardBuilder:
    """A Parquet file: a row per sample, a column per field (``.cls`` int64, ``.txt`` string, the rest
    binary, decoded by the reader by the column's extension) and ``__key__``."""

    suffix = ".parquet"
    same_fields = True
    _OVERHEAD = 4096  # footer and page headers, roughly; finish() makes the limit exact

    def __init__(self) -> None:
        self._samples: list[Sample] = []
        self.samples, self.size = 0, self._OVERHEAD

    def added_size(self, sample: Sample) -> int:
        key, fields = sample
        return len(key) + sum(len(data) + 8 for data in fields.values())

    def add(self, sample: Sample) -> None:
        self.size += self.added_size(sample)
        self._samples.append(sample)
        self.samples += 1

    def finish(self, limit: int) -> tuple[bytes, list[Sample]]:
        """The file's bytes, with as many samples as fit in ``limit`` (at least one); the rest back."""
        keep = len(self._samples)
        data = parquet_bytes(self._samples)
        while len(data) > limit and keep > 1:
            keep = max(1, min(keep - 1, int(keep * limit / len(data) * 0.95)))
            data = parquet_bytes(self._samples[:keep])
        return data, self._samples[keep:]


def parquet_bytes(samples: Sequence[Sample]) -> bytes:
    """A Parquet file of ``samples`` (which share their field names), in row groups of about 8 MiB."""
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    names = list(samples[0][1])
    types = {"cls": pa.int64(), "txt": pa.large_string()}
    schema = pa.schema(
        [("__key__", pa.string())] + [(n, types.get(extension(n), pa.large_binary())) for n in names]
    )
    columns: dict[str, list[Any]] = {"__key__": [key for key, _ in samples]}
    for name in names:
        columns[name] = [_cell(name, fields[name]) for _, fields in samples]
    try:
        table = pa.Table.from_pydict(columns, schema=schema)
    except (pa.ArrowException, OverflowError) as err:
        raise PackError(
            f"items {samples[0][0]}..{samples[-1][0]}: cannot make a Parquet table ({err}); "
            "an int beyond 64 bits? use format='tar'"
        ) from err
    row_bytes = max(1, sum(len(d) for _, fields in samples for d in fields.values()) // len(samples))
    out = pa.BufferOutputStream()
    binary = [n for n in names if schema.field(n).type == pa.large_binary()]
    pq.write_table(  # binary cells unique per row: statistics and dictionaries would only copy them
        table,
        out,
        row_group_size=max(1, _ROW_GROUP_BYTES // row_bytes),
        write_statistics=[n for n in ["__key__", *names] if n not in binary],
        use_dictionary=[n for n in ["__key__", *names] if n not in binary],
    )
    return bytes(out.getvalue().to_pybytes())


def _cell(name: str, data: bytes) -> Any:
    kind = extension(name)
    if kind == "cls":
        return int(data)
    if kind == "txt":
        return data.decode("utf-8")
    return data


BUILDERS: dict[str, type[TarShardBuilder] | type[ParquetShardBuilder]] = {
    "tar": TarShardBuilder,
    "parquet": ParquetShardBuilder,
}
"""Shard format → its builder."""
