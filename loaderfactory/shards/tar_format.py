"""Webdataset tar shards: a sample is the consecutive members that share a key.

The key of a member is its path up to the first dot of its file name (``a/b.seg.png`` → key ``a/b``,
field ``seg.png``), webdataset's rule. Opening a shard walks its tar headers only (on a remote shard,
in 1 MiB range reads); a sample is then one byte-range read spanning its members.
"""

from __future__ import annotations

import posixpath
import tarfile
from dataclasses import dataclass
from typing import Any

from loaderfactory.shards.decode import Decode, decode_in_sample
from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.range_file import open_shard
from loaderfactory.shards.storage import Storage


@dataclass(frozen=True)
class TarSample:
    """Where a sample's fields lie in its shard: field → (offset, size) of the member's data."""

    key: str
    fields: dict[str, tuple[int, int]]

    @property
    def span(self) -> tuple[int, int]:
        """The byte range that covers every field, read in one request."""
        return min(o for o, _ in self.fields.values()), max(o + s for o, s in self.fields.values())


def split_member_name(name: str) -> tuple[str, str]:
    """``("dir/key", "ext.more")`` from ``dir/key.ext.more``; an empty field when the name has no dot."""
    folder, base = posixpath.split(name)
    stem, _, field = base.partition(".")
    return posixpath.join(folder, stem) if folder else stem, field


def scan_tar(storage: Storage, url: str) -> list[TarSample]:
    """The samples of the tar at ``url`` from its headers; ShardError when it is truncated or not a tar."""
    size = storage.size(url)
    samples: list[TarSample] = []
    with open_shard(storage, url, size) as file:
        try:
            with tarfile.open(fileobj=file, mode="r:") as archive:
                for member in archive:
                    _add_member(samples, member, url, size)
                end = archive.offset
        except (tarfile.TarError, EOFError) as err:
            raise ShardError(
                f"{url}: not a readable tar ({err}); is the shard truncated or corrupt?"
            ) from err
    _check_end_marker(storage, url, end, size)
    return samples


def _add_member(samples: list[TarSample], member: tarfile.TarInfo, url: str, size: int) -> None:
    if not member.isfile():
        return
    key, field = split_member_name(member.name)
    if member.offset_data + member.size > size:
        raise ShardError(
            f"{url}: truncated tar: member {member.name!r} of sample {key!r} ends at byte "
            f"{member.offset_data + member.size} but the shard has {size} bytes; write the shard again"
        )
    if not field:
        return  # webdataset skips members without an extension too
    if not samples or samples[-1].key != key:
        samples.append(TarSample(key, {}))
    samples[-1].fields[field] = (member.offset_data, member.size)


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
        self.samples = scan_tar(storage, url)

    def __len__(self) -> int:
        return len(self.samples)

    def sample(self, index: int) -> dict[str, Any]:
        """Sample ``index`` of this shard: ``__key__`` and each field, decoded by extension."""
        entry = self.samples[index]
        start, end = entry.span
        data = self.storage.read_range(self.url, start, end)
        if len(data) < end - start:
            raise ShardError(
                f"{self.url}: truncated tar: sample {entry.key!r} (#{index}) ends past the shard"
            )
        out: dict[str, Any] = {"__key__": entry.key}
        for field, (offset, size) in entry.fields.items():
            raw = data[offset - start : offset - start + size]
            where = f"{self.url}: sample {entry.key!r} (#{index})"
            out[field] = decode_in_sample(field, raw, self.decode, where)
        return out

    def close(self) -> None:
        """Nothing stays open between samples; here for the shard protocol."""
