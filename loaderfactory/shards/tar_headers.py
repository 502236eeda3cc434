"""A quick walk over the headers of a plain ustar archive: the files' names, data offsets and sizes.

``tarfile`` builds a ``TarInfo`` per member (about 50 µs each); a shard of 4 KB samples has 30 000
members. This reads each 512-byte header and takes only what a shard needs. Anything it does not
handle exactly as ``tarfile`` would (pax or GNU long-name headers, base-256 sizes, links, a bad
checksum, a cut-off header, an empty archive) makes it give up, and the caller reads the archive with
``tarfile`` instead, which also reports the errors.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

BLOCK = 512
CHUNK = 1 << 16
"""Bytes read at a time: the headers of several small members per read."""
CHECK_AT_ONCE = 4096
"""Headers whose checksums are checked together (numpy sums), at most ``BLOCK`` bytes each."""
ZERO_BLOCK = bytes(BLOCK)
FILE_TYPES = (b"0", b"\0", b"7")
"""Regular files (``REGTYPE``, ``AREGTYPE``, ``CONTTYPE``): ``TarInfo.isfile()``."""
POSIX_MAGIC = b"ustar\x0000"

Member = tuple[str, int, int]
"""(name, offset of its data, size)."""


def walk_headers(file: BinaryIO, size: int) -> tuple[list[Member], int] | None:
    """The regular files of the archive in ``file`` and the offset of its end-of-archive block;
    None when the archive needs ``tarfile`` (see the module docstring). Reads ``CHUNK`` bytes at a
    time after small members (a header alone after large ones) and checks checksums in batches."""
    members: list[Member] = []
    headers: list[bytes] = []
    checksums: list[int] = []
    offset = chunk_start = 0
    chunk, read_size, typical = b"", CHUNK, 0
    while offset + BLOCK <= size:
        at = offset - chunk_start
        if at + BLOCK > len(chunk):
            file.seek(offset)
            chunk, chunk_start, at = file.read(min(read_size, size - offset)), offset, 0
            if len(chunk) < BLOCK:
                return None
        block = chunk[at : at + BLOCK]
        if block == ZERO_BLOCK:
            return (members, offset) if offset and _checksums_match(headers, checksums) else None
        parsed = _parse(block)
        if parsed is None:
            return None
        name, kind, member_size, checksum = parsed
        headers.append(block)
        checksums.append(checksum)
        if len(headers) == CHECK_AT_ONCE and not _checksums_match(headers, checksums):
            return None
        if kind in FILE_TYPES and not (kind == b"\0" and name.endswith("/")):
            members.append((name, offset + BLOCK, member_size))
        elif kind != b"5" or member_size:
            return None  # a link, a device, a pax or GNU header: tarfile's rules apply
        offset += BLOCK + -(-member_size // BLOCK) * BLOCK
        typical = (typical * 7 + member_size) // 8  # large members: a header alone per read
        read_size = CHUNK if typical <= CHUNK // 8 else BLOCK
    return None


def _checksums_match(headers: list[bytes], checksums: list[int]) -> bool:
    """Whether each header's checksum is the unsigned sum of its bytes, the checksum field as spaces
    (tarfile also accepts the signed sum; it decides those); both lists are emptied."""
    blocks = np.frombuffer(b"".join(headers), np.uint8).reshape(-1, BLOCK)
    sums = blocks.sum(axis=1, dtype=np.int64) - blocks[:, 148:156].sum(axis=1, dtype=np.int64) + 8 * 32
    matched = bool(np.array_equal(sums, np.asarray(checksums, np.int64)))
    headers.clear()
    checksums.clear()
    return matched


def _parse(block: bytes) -> tuple[str, bytes, int, int] | None:
    """(name, type flag, size, checksum) of a ustar header block; None when it is not a plain one."""
    try:
        checksum = int(_field(block[148:156]) or b"0", 8)
        if block[124] & 0x80:
            return None  # base-256 size
        member_size = int(_field(block[124:136]) or b"0", 8)
    except ValueError:
        return None
    name = block[:100].split(b"\0", 1)[0]
    if block[345]:
        prefix = block[345:500].split(b"\0", 1)[0]
        if block[257:265] != POSIX_MAGIC:
            return None
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape"), block[156:157], member_size, checksum


def _field(raw: bytes) -> bytes:
    return raw.split(b"\0", 1)[0].strip()
