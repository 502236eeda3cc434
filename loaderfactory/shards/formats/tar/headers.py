"""A quick walk over the headers of a plain ustar archive: the files' names, data offsets and sizes.

``tarfile`` builds a ``TarInfo`` per member (about 50 µs each); a shard of 4 KB samples has 30 000
members. This reads each 512-byte header and takes only what a shard needs. Anything it does not
handle exactly as ``tarfile`` would (pax or GNU long-name headers, base-256 sizes, links, a bad
checksum, a cut-off header, an empty archive) makes it give up, and the caller reads the archive with
``tarfile`` instead, which also reports the errors.
"""

from __future__ import annotations

import mmap
from typing import BinaryIO

import numpy as np

BLOCK = 512
NAME = 100
"""Bytes of a header's name field."""
CHUNK = 1 << 16
"""Bytes read at a time after a small member: the headers of several small members per read."""
PAGE = 4096
"""Bytes read after a large member: its successor's header, and the header after a small successor
(a label beside an image), in one read that costs no more than the header alone."""
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
    None when the archive needs ``tarfile`` (see the module docstring)."""
    walked = walk_members(file, size)
    if walked is None:
        return None
    names, offsets, sizes, end = walked
    return list(zip(names, offsets, sizes, strict=True)), end


Walked = tuple[list[str], list[int], list[int], int]
"""The regular files' names, data offsets and sizes, and where the end-of-archive block is."""
Blocks = tuple[np.ndarray, np.ndarray, np.ndarray, int]
"""Header blocks (a row of ``BLOCK`` bytes each), their offsets and sizes, and the archive's end."""


def walk_members(file: BinaryIO, size: int) -> Walked | None:
    """:func:`walk_headers` as flat lists: quickly where every header is written the usual way."""
    walked = walk_canonical(file, size)
    if walked is not None:
        return walked
    each = _walk_each(file, size)
    if each is None:
        return None
    members, end = each
    return [m[0] for m in members], [m[1] for m in members], [m[2] for m in members], end


DENSE_STRIDE = 16 << 10
"""Local archives whose first members lie at most this far apart on average are walked with
:func:`walk_dense`: their headers lie on nearly every page anyway, so reading all pages costs
no more than reading the headers alone."""
MAGIC = np.frombuffer(b"ustar", np.uint8)
"""What every POSIX and GNU header holds at byte 257 (and a data block, rarely: then the chain
below breaks and the walk is done header by header)."""


def walk_dense(file: BinaryIO, size: int) -> Walked | None:
    """:func:`walk_canonical` for a local archive of small members, without a loop per header:
    every block with the ``ustar`` magic is a candidate header, and the candidates must form the
    chain that each header's size gives (each one's next block is the next candidate, the last
    one's is the end-of-archive block). None when the file is not local, its members are large,
    or the chain breaks."""
    blocks = dense_blocks(file, size)
    return None if blocks is None else _files(*blocks)


def dense_blocks(file: BinaryIO, size: int) -> Blocks | None:
    try:
        descriptor = file.fileno()
    except (AttributeError, OSError):
        return None  # a remote shard's range reads
    if not _dense(file, size):
        return None
    with mmap.mmap(descriptor, size, access=mmap.ACCESS_READ) as mapped:
        blocks = np.frombuffer(mapped, np.uint8, count=size // BLOCK * BLOCK).reshape(-1, BLOCK)
        candidates = np.flatnonzero(blocks[:, 257] == MAGIC[0])  # one column first: far quicker
        candidates = candidates[(blocks[candidates, 258:262] == MAGIC[1:]).all(axis=1)]
        headers = blocks[candidates]  # a copy: the map closes below
        del blocks
    digits = headers[:, 124:135].astype(np.int64) - ord("0")
    if not ((digits >= 0) & (digits <= 7)).all():
        return None
    sizes = digits @ (8 ** np.arange(10, -1, -1, dtype=np.int64))
    following = candidates + 1 + -(-sizes // BLOCK)
    if not (len(candidates) and candidates[0] == 0 and np.array_equal(following[:-1], candidates[1:])):
        return None
    end = int(following[-1]) * BLOCK
    if end + BLOCK > size or file.seek(end) != end or file.read(BLOCK) != ZERO_BLOCK:
        return None
    return headers, candidates * BLOCK, sizes, end


def _dense(file: BinaryIO, size: int) -> bool:
    """Whether the first (up to 16) members in the first ``CHUNK`` bytes lie ``DENSE_STRIDE`` or
    less apart on average."""
    file.seek(0)
    head = file.read(min(CHUNK, size))
    offset = count = 0
    while count < 16 and offset + BLOCK <= len(head):
        try:
            member_size = int(head[offset + 124 : offset + 135], 8)
        except ValueError:
            return False
        offset += BLOCK + -(-member_size // BLOCK) * BLOCK
        count += 1
    return count > 0 and offset // count <= DENSE_STRIDE


def walk_canonical(file: BinaryIO, size: int) -> Walked | None:
    """:func:`walk_members` for archives whose headers are all written the usual way (tarfile's,
    GNU tar's and ``pack``'s plain members: 11 octal size digits, a ``%06o NUL space`` checksum,
    no name prefix); None for anything else. The loop reads only each header's size, to find the
    next; names, types and checksums of all headers are then checked at once, with numpy."""
    blocks = canonical_blocks(file, size)
    return None if blocks is None else _files(*blocks)


def canonical_blocks(file: BinaryIO, size: int, mapped: bytes | mmap.mmap = b"") -> Blocks | None:
    """The headers walked one after the other: in ``mapped`` (a memory map of the whole file: no
    read call per header, where a shard of 100 KB samples has two headers a sample), else by reads."""
    offsets: list[int] = []
    sizes: list[int] = []
    headers: list[bytes] = []
    block_at = _Window(file, size, mapped).block
    offset, read_size = 0, CHUNK
    while offset + BLOCK <= size:
        header = block_at(offset, read_size)
        if header is None:
            return None
        if not header[0]:  # an empty name: the end-of-archive block, or something for tarfile
            if header != ZERO_BLOCK or not offsets:
                return None
            blocks = np.frombuffer(b"".join(headers), np.uint8).reshape(-1, BLOCK)
            return blocks, np.array(offsets, np.int64), np.array(sizes, np.int64), offset
        try:
            member_size = int(header[124:135], 8)
        except ValueError:
            return None
        offsets.append(offset)
        sizes.append(member_size)
        headers.append(header)
        offset += BLOCK + -(-member_size // BLOCK) * BLOCK
        read_size = CHUNK if member_size <= CHUNK // 8 else PAGE
    return None


def _files(headers: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, end: int) -> Walked | None:
    """The regular files among the headers walked (at ``offsets``); None as :func:`_names` says."""
    names = _names(headers, sizes)
    if names is None:
        return None
    data_offsets, sizes_list = (offsets + BLOCK).tolist(), sizes.tolist()
    files = [index for index, name in enumerate(names) if name is not None]
    if len(files) == len(names):
        return names, data_offsets, sizes_list, end  # type: ignore[return-value]  # no None
    return (
        [names[index] for index in files],  # type: ignore[misc]  # files only
        [data_offsets[index] for index in files],
        [sizes_list[index] for index in files],
        end,
    )


OCTAL_WEIGHTS = np.array([8**k for k in range(5, -1, -1)], np.int64)
"""The weights of a 6-digit octal field (a checksum), most significant digit first."""


def _octal_digits(field: np.ndarray) -> bool:
    return bool(((field >= ord("0")) & (field <= ord("7"))).all())


def _names(headers: np.ndarray, sizes: np.ndarray) -> list[str | None] | None:
    """Each header's name, None for a directory; None for all when one header is not written the
    usual way (see :func:`walk_canonical`) or its checksum does not match."""
    checked = checked_headers(headers, sizes)
    if checked is None:
        return None
    directory, _ = checked
    decoded: list[str | None] = [
        raw.decode("utf-8", "surrogateescape") for raw in headers[:, :NAME].view(f"S{NAME}")[:, 0].tolist()
    ]
    if directory.any():
        for index in np.flatnonzero(directory).tolist():
            decoded[index] = None
    if any(name.endswith("/") for name in decoded if name is not None):
        return None  # a directory written as a file: tarfile's rules
    return decoded


def checked_headers(headers: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Which headers are directories (the others are regular files), and each name's length; None
    when one header is not written the usual way (see :func:`walk_canonical`) or its checksum does
    not match."""
    checksum = headers[:, 148:154]
    if not (
        _octal_digits(headers[:, 124:135])  # int() also took signs, spaces and underscores
        and np.isin(headers[:, 135], (0, 32)).all()
        and _octal_digits(checksum)
        and not headers[:, 154].any()
        and (headers[:, 155] == 32).all()
        and not headers[:, 345].any()  # a name prefix: the walk below reads it
    ):
        return None
    stored = (checksum.astype(np.int64) - ord("0")) @ OCTAL_WEIGHTS
    summed = headers.sum(axis=1, dtype=np.uint32) - headers[:, 148:156].sum(axis=1, dtype=np.uint32)
    lengths = name_lengths(headers)
    if not np.array_equal(stored, summed + 8 * 32) or lengths is None:
        return None
    kinds = headers[:, 156]
    regular = np.isin(kinds, (ord("0"), 0, ord("7")))  # FILE_TYPES
    directory: np.ndarray = (kinds == ord("5")) & (sizes == 0)
    if not (regular | directory).all():
        return None  # links, devices, pax or GNU headers: tarfile's rules
    return directory, lengths


def name_lengths(headers: np.ndarray) -> np.ndarray | None:
    """The length of each header's name (up to its first NUL); None when a byte follows that NUL."""
    names = headers[:, :NAME]
    lengths: np.ndarray = np.where(names[:, -1] != 0, NAME, (names == 0).argmax(axis=1))
    return lengths if np.array_equal((names != 0).sum(axis=1), lengths) else None


def _walk_each(file: BinaryIO, size: int) -> tuple[list[Member], int] | None:
    """:func:`walk_headers` one header at a time, for archives not written the usual way. Reads
    ``CHUNK`` bytes at a time after small members (a header alone after large ones) and checks
    checksums in batches."""

    members: list[Member] = []
    headers: list[bytes] = []
    checksums: list[int] = []
    block_at = _Window(file, size).block
    offset, read_size, typical = 0, CHUNK, 0
    while offset + BLOCK <= size:
        block = block_at(offset, read_size)
        if block is None:
            return None
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


class _Window:
    """The header blocks of ``file`` by offset: from ``mapped`` (a memory map of the whole file: no
    read call per header), else from reads that also serve the headers of the small members after."""

    __slots__ = ("_chunk", "_file", "_size", "_start")

    def __init__(self, file: BinaryIO, size: int, mapped: bytes | mmap.mmap = b"") -> None:
        self._file = file
        self._size = size
        self._chunk = mapped
        self._start = 0

    def block(self, offset: int, read_size: int) -> bytes | None:
        """The ``BLOCK`` bytes at ``offset``, read with what follows up to ``read_size`` bytes when
        not at hand; None where the file ends within them."""
        chunk = self._chunk
        at = offset - self._start
        if at + BLOCK > len(chunk):
            self._file.seek(offset)
            chunk = self._chunk = self._file.read(min(read_size, self._size - offset))
            self._start, at = offset, 0
            if len(chunk) < BLOCK:
                return None
        return chunk[at : at + BLOCK]


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
