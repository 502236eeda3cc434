"""Webdataset tar shards: a sample is the consecutive members that share a key.

The key of a member is its path up to the first dot of its file name (``a/b.seg.png`` → key ``a/b``,
field ``seg.png``), webdataset's rule. Opening a shard walks its tar headers only (on a remote shard,
in 1 MiB range reads); a sample is then one byte-range read spanning its members.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import weakref
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.formats.decode import Decode, decode_error, decodes_npy, field_decoder
from loaderfactory.shards.formats.tar.blocks import header_blocks
from loaderfactory.shards.formats.tar.headers import Walked, walk_members
from loaderfactory.shards.formats.tar.members import kept_members
from loaderfactory.shards.formats.tar.samples import group_members
from loaderfactory.shards.formats.tar.table import TarTable
from loaderfactory.shards.storage.range_file import open_shard
from loaderfactory.shards.storage.remote_errors import missing
from loaderfactory.shards.storage.store import Storage, split_scheme

RUN_BYTES = 1 << 16
"""The most bytes one read of consecutive samples spans: larger buffers come from fresh pages
(malloc's mmap threshold) and cost more than separate reads of samples this large."""


def split_member_name(name: str) -> tuple[str, str]:
    """``("dir/key", "ext.more")`` from ``dir/key.ext.more``; an empty field when the name has no dot."""
    folder, base = posixpath.split(name)
    stem, _, field = base.partition(".")
    return posixpath.join(folder, stem) if folder else stem, field


def scan_tar(storage: Storage, url: str) -> TarTable:
    """The samples of the tar at ``url`` from its headers; ShardError when it is truncated or not a tar."""
    size = storage.size(url)
    with open_shard(storage, url, size) as file:
        blocks = header_blocks(file, size)
        if blocks is not None and blocks.mapped:
            storage.stats.add("bytes_local", blocks.mapped)  # looked at without a read
        grouped = None if blocks is None else group_members(blocks, size)
        if grouped is not None and blocks is not None:
            samples, end = grouped, blocks.end
        else:  # names, members or headers that the rules below handle one by one
            samples, end = _scan_by_the_rules(file, url, size)
    _check_end_marker(storage, url, end, size)
    return samples


def _scan_by_the_rules(file: BinaryIO, url: str, size: int) -> tuple[TarTable, int]:
    samples = TarTable()
    walked = walk_members(file, size)
    end = None if walked is None else _add_walked(walked, samples, url, size)
    if end is None:  # pax or GNU headers, or something to report: tarfile reads it
        samples.clear()
        end = _scan_with_tarfile(file, samples, url, size)
    return samples, end


def _add_walked(walked: Walked, samples: TarTable, url: str, size: int) -> int:
    """The members walked added to ``samples``; where the end-of-archive block is."""
    names, offsets, sizes, end = walked
    keys, bounds, fields = samples.keys, samples.bounds, samples.fields
    for name, offset, member_size in zip(names, offsets, sizes, strict=True):
        dot = name.find(".", name.rfind("/") + 1)
        if offset + member_size > size or "//" in name or dot < 0 or dot == len(name) - 1:
            _add_file(samples, name, offset, member_size, url, size)  # errors and odd names: the rules
            continue
        key, field = name[:dot], name[dot + 1 :]
        if not keys or keys[-1] != key:
            keys.append(key)
            bounds.append(bounds[-1])
        elif field in fields[bounds[-2] :]:
            raise repeated_field(url, name, key, field)
        fields.append(field)
        samples.offsets.append(offset)
        samples.sizes.append(member_size)
        bounds[-1] += 1
    return end


def _scan_with_tarfile(file: BinaryIO, samples: TarTable, url: str, size: int) -> int:
    file.seek(0)
    try:
        with tarfile.open(fileobj=file, mode="r:") as archive:
            for member in archive:
                if member.isfile():
                    _add_file(samples, member.name, member.offset_data, member.size, url, size)
            return archive.offset
    except (tarfile.TarError, EOFError) as err:
        raise ShardError(f"{url}: not a readable tar ({err}); is the shard truncated or corrupt?") from err


def _add_file(samples: TarTable, name: str, offset: int, member_size: int, url: str, size: int) -> None:
    key, field = split_member_name(name)
    if offset + member_size > size:
        raise ShardError(
            f"{url}: truncated tar: member {name!r} of sample {key!r} ends at byte "
            f"{offset + member_size} but the shard has {size} bytes; write the shard again"
        )
    if not field:
        return  # webdataset skips members without an extension too
    if samples.repeats(key, field):
        raise repeated_field(url, name, key, field)
    samples.add(key, field, offset, member_size)


def repeated_field(url: str, name: str, key: str, field: str) -> ShardError:
    """The error for member ``name`` repeating field ``field`` of the sample ``key`` before it."""
    return ShardError(
        f"{url}: member {name!r} repeats field {field!r} of sample {key!r}: two samples with the same "
        "key in a row, or a field written twice (webdataset refuses it too: 'duplicate file name'); "
        "give every sample its own key and write the shard again"
    )


def _check_end_marker(storage: Storage, url: str, end: int, size: int) -> None:
    """A complete tar ends with a zero block after its last member; a cut-off header leaves none."""
    block = storage.read_range(url, end, min(size, end + 512))
    if len(block) < 512 or any(block):
        raise ShardError(
            f"{url}: truncated tar: no end-of-archive block after byte {end} (the shard has {size} "
            "bytes); write the shard again"
        )


class TarShard:
    """One opened tar shard: its sample table, read from headers, and decoded samples on demand."""

    def __init__(self, storage: Storage, url: str, decode: Decode = True) -> None:
        self.storage, self.url, self.decode = storage, url, decode
        self.samples = kept_members(url) or scan_tar(storage, url)
        self._decoders: dict[str, Callable[[bytes | memoryview], Any]] = {}  # by field name
        self._fd = -1  # a local shard's file, opened on the first sample read
        self._closer: weakref.finalize[Any, Any] | None = None  # closes it when this shard is collected

    def file(self) -> int:
        """The descriptor of a local shard's file, opened on first use and kept open; -1 for a
        remote shard."""
        if self._closer is None:
            scheme, path = split_scheme(self.url)
            if scheme != "file":
                return -1
            try:
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise missing(self.url) from None
            self._closer = weakref.finalize(self, os.close, self._fd)
        return self._fd

    def read(self, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` (fewer where the shard ends first): one ``pread`` on a local shard's
        file into a writable buffer that decoded arrays can share without a copy (left
        uninitialised: the read fills what is returned)."""
        descriptor = self.file()
        if descriptor < 0:
            return memoryview(self.storage.read_range(self.url, start, end))
        buffer = memoryview(np.empty(end - start, np.uint8))  # type: ignore[arg-type]  # a buffer
        got = os.preadv(descriptor, [buffer], start)
        self.storage.stats.add("bytes_local", got)
        return buffer[:got]

    def decoder(self, field: str) -> Callable[[bytes | memoryview], Any]:
        """What decodes ``field`` in this shard (see :func:`.field_decoder`)."""
        decoder = self._decoders.get(field)
        if decoder is None:
            decoder = self._decoders[field] = field_decoder(field, self.decode)
        return decoder

    def decodes_npy(self, field: str) -> bool:
        """Whether ``field`` decodes as ``.npy`` to a tensor."""
        return decodes_npy(field, self.decode)

    def __len__(self) -> int:
        return len(self.samples)

    def sample(self, index: int) -> dict[str, Any]:
        """Sample ``index`` of this shard: ``__key__`` and each field, decoded by extension."""
        return self.sample_run(index, 1)[0]

    def sample_run(self, first: int, count: int) -> list[dict[str, Any]]:
        """Samples ``first`` to ``first + count - 1``: each read spans as many of them as fit in
        ``RUN_BYTES`` (at least one sample)."""
        out: list[dict[str, Any]] = []
        table = self.samples
        begin, stop_all = first, min(first + count, len(table))
        while begin < stop_all:
            stop, limit = begin + 1, table.start(begin) + RUN_BYTES
            while stop < stop_all and table.end(stop) <= limit:
                stop += 1
            out.extend(self._read_samples(begin, stop))
            begin = stop
        return out

    def _read_samples(self, first: int, stop: int) -> list[dict[str, Any]]:
        """Samples ``first`` to ``stop - 1``, decoded from one read spanning them."""
        table = self.samples
        start, end = table.start(first), table.end(stop - 1)  # samples lie in the shard in order
        data = self.read(start, end)
        if len(data) < end - start:
            for index in range(first, stop):
                if len(data) < table.end(index) - start:
                    key = table.keys[index]
                    raise ShardError(
                        f"{self.url}: truncated tar: sample {key!r} (#{index}) ends past the shard"
                    )
        keys, bounds, fields, offsets, sizes = (
            table.keys,
            table.bounds,
            table.fields,
            table.offsets,
            table.sizes,
        )
        decoders = self._decoders
        out = []
        for index in range(first, stop):
            sample: dict[str, Any] = {"__key__": keys[index]}
            for member in range(bounds[index], bounds[index + 1]):
                field = fields[member]
                decoder = decoders.get(field) or self.decoder(field)
                at = offsets[member] - start
                try:
                    sample[field] = decoder(data[at : at + sizes[member]])
                except Exception as err:
                    where = f"{self.url}: sample {keys[index]!r} (#{index})"
                    raise decode_error(field, err, where) from err
            out.append(sample)
        return out

    def tar(self) -> TarShard:
        """This shard (see :class:`~loaderfactory.shards.read.cached_shard.Shard`)."""
        return self

    def close(self) -> None:
        """Nothing to do here: a local shard's file closes when the shard is collected, not before,
        as a sample read on another thread may still be using it."""
