"""A quick walk over the headers of a plain ustar archive: the files' names, data offsets and sizes.

``tarfile`` builds a ``TarInfo`` per member (about 50 µs each); a shard of 4 KB samples has 30 000
members. This reads each 512-byte header and takes only what a shard needs. Anything it does not
handle exactly as ``tarfile`` would (pax or GNU long-name headers, base-256 sizes, links, a bad
checksum, a cut-off header, an empty archive) makes it give up, and the caller reads the archive with
``tarfile`` instead, which also reports the errors.
"""

from __future__ import annotations

from typing import BinaryIO

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
FILE_TYPES = (b"0", b"\0", b"7")
"""Regular files (``REGTYPE``, ``AREGTYPE``, ``CONTTYPE``): ``TarInfo.isfile()``."""
POSIX_MAGIC = b"ustar\x0000"

Member = tuple[str, int, int]
"""(name, offset of its data, size)."""


def walk_headers(file: BinaryIO, size: int) -> tuple[list[Member], int] | None:
    """The regular files of the archive in ``file`` and the offset of its end-of-archive block;
    None when the archive needs ``tarfile`` (see the module docstring)."""
    members: list[Member] = []
    offset = 0
    while offset + BLOCK <= size:
        file.seek(offset)
        block = file.read(BLOCK)
        if len(block) < BLOCK:
            return None
        if block == ZERO_BLOCK:
            return (members, offset) if offset else None
        parsed = _parse(block)
        if parsed is None:
            return None
        name, kind, member_size = parsed
        if kind in FILE_TYPES and not (kind == b"\0" and name.endswith("/")):
            members.append((name, offset + BLOCK, member_size))
        elif kind != b"5" or member_size:
            return None  # a link, a device, a pax or GNU header: tarfile's rules apply
        offset += BLOCK + -(-member_size // BLOCK) * BLOCK
    return None


def _parse(block: bytes) -> tuple[str, bytes, int] | None:
    """(name, type flag, size) of a ustar header block; None when it is not a plain one."""
    try:
        checksum = int(_field(block[148:156]) or b"0", 8)
        if block[124] & 0x80:
            return None  # base-256 size
        member_size = int(_field(block[124:136]) or b"0", 8)
    except ValueError:
        return None
    if checksum != sum(block) - sum(block[148:156]) + 8 * 32:
        return None  # tarfile also accepts the signed sum; let it decide
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    if prefix:
        if block[257:265] != POSIX_MAGIC:
            return None
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape"), block[156:157], member_size


def _field(raw: bytes) -> bytes:
    return raw.split(b"\0", 1)[0].strip()
