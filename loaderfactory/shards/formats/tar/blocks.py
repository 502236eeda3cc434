"""The checked headers of a plain tar archive of regular files, found by the quickest walk that
fits it: every page at once for small members (:func:`.headers.walk_dense`), guessed places
for members whose sizes repeat (:mod:`.strided`), else one header after the other."""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import numpy as np

from loaderfactory.shards.formats.tar.headers import (
    BLOCK,
    PAGE,
    canonical_blocks,
    checked_headers,
    dense_blocks,
)
from loaderfactory.shards.formats.tar.strided import strided_blocks


class HeaderBlocks(NamedTuple):
    """The checked headers of a plain archive of regular files (rows of ``BLOCK`` bytes), where
    each member's data starts, its size, and where the end-of-archive block is."""

    headers: np.ndarray
    data_offsets: np.ndarray
    sizes: np.ndarray
    name_lengths: np.ndarray
    end: int
    mapped: int
    """Bytes of a local file looked at by the walk (to count as read): every page for
    :func:`.headers.walk_dense`, the header blocks for :func:`.strided.strided_blocks`,
    the pages holding headers for the walk one by one through a memory map."""


def header_blocks(file: BinaryIO, size: int) -> HeaderBlocks | None:
    """The headers as :func:`.headers.walk_dense`, :func:`.strided.strided_blocks` or
    :func:`.headers.walk_canonical` find them, checked, when every member is a regular file;
    None otherwise (then :func:`.headers.walk_members` reads the archive by the rules)."""
    blocks = dense_blocks(file, size)
    mapped = size if blocks is not None else 0
    if blocks is None:
        blocks = strided_blocks(file, size)
        mapped = 0 if blocks is None else len(blocks[1]) * BLOCK + BLOCK  # the headers and the end block
    if blocks is None:
        with _memory_map(file, size) as whole:
            blocks = canonical_blocks(file, size, b"" if whole is None else whole)
        if blocks is not None and whole is not None:
            mapped = len(np.unique(blocks[1] // PAGE)) * PAGE  # the pages holding headers
    if blocks is None:
        return None
    headers, offsets, sizes, end = blocks
    checked = checked_headers(headers, sizes)
    if checked is None or checked[0].any():
        return None
    return HeaderBlocks(headers, offsets + BLOCK, sizes, checked[1], end, min(mapped, size))


@contextlib.contextmanager
def _memory_map(file: BinaryIO, size: int) -> Iterator[mmap.mmap | None]:
    """A read-only map of a local ``file``'s ``size`` bytes; None for a remote shard's range reads,
    an empty file, or a file system that maps nothing."""
    try:
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) if size else None
    except (AttributeError, OSError, ValueError):
        mapped = None
    if mapped is None:
        yield None
        return
    with mapped:
        yield mapped
