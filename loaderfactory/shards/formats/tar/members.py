"""A local tar shard's member table kept beside it (``shard-000000.tar.members.npz``), so that opening
the shard reads one small file instead of every member's header.

``pack`` writes one next to each tar shard it writes to a local folder. A reader takes it only when
it still describes the shard: the table is no older than the shard's file, was written for a shard
of the size the file has, and the headers of the shard's first and last members and its end marker
say what the table says. Anything else (no table, an older one, one that does not load or does not
agree) leaves the shard to be scanned as before (:func:`.shard.scan_tar`), which never depends
on the table; so a table can be deleted at any time. Remote shards are always scanned.
"""

from __future__ import annotations

import io
import logging
import os
import zipfile

import numpy as np

from loaderfactory.shards.formats.tar.table import TarTable
from loaderfactory.shards.storage.store import split_scheme

SUFFIX = ".members.npz"
BLOCK = 512
log = logging.getLogger(__name__)


def members_url(url: str) -> str:
    """Where the member table of the tar shard at ``url`` is kept."""
    return url + SUFFIX


def members_bytes(table: TarTable, shard_bytes: int) -> bytes:
    """``table`` of a shard of ``shard_bytes`` bytes, as the file :func:`kept_members` reads."""
    names = sorted(set(table.fields))
    number = {name: at for at, name in enumerate(names)}
    out = io.BytesIO()
    np.savez(
        out,
        shard_bytes=np.int64(shard_bytes),
        keys=np.array(table.keys, dtype=str),
        bounds=np.asarray(table.bounds, dtype=np.int64),
        fields=np.array(names, dtype=str),
        field_numbers=np.array([number[field] for field in table.fields], dtype=np.int32),
        offsets=np.asarray(table.offsets, dtype=np.int64),
        sizes=np.asarray(table.sizes, dtype=np.int64),
    )
    return out.getvalue()


def kept_members(url: str) -> TarTable | None:
    """The member table kept beside the local tar shard at ``url``, where it still describes the
    shard (see the module); None otherwise."""
    scheme, path = split_scheme(url)
    if scheme != "file":
        return None
    try:
        shard, kept = os.stat(path), os.stat(path + SUFFIX)
    except OSError:
        return None
    if kept.st_mtime_ns < shard.st_mtime_ns:
        log.debug("%s: its member table is older than it; scanning it", url)
        return None
    try:
        with open(path + SUFFIX, "rb") as file, np.load(file, allow_pickle=False) as arrays:
            if int(arrays["shard_bytes"]) != shard.st_size:
                return None
            table = _table(arrays)
    except (OSError, EOFError, ValueError, KeyError, IndexError, zipfile.BadZipFile) as err:
        log.debug("%s: its member table does not load (%s); scanning it", url, err)
        return None
    return table if _agrees(path, table, shard.st_size) else None


def _table(arrays: np.lib.npyio.NpzFile) -> TarTable:
    table = TarTable()
    names = arrays["fields"].tolist()
    table.keys = arrays["keys"].tolist()
    table.bounds = arrays["bounds"].tolist()
    table.fields = [names[number] for number in arrays["field_numbers"].tolist()]
    table.offsets = arrays["offsets"].tolist()
    table.sizes = arrays["sizes"].tolist()
    members = len(table.fields)
    if not (len(table.offsets) == len(table.sizes) == members == table.bounds[-1]):
        raise ValueError("its arrays differ in length")
    if len(table.bounds) != len(table.keys) + 1 or table.bounds[0] != 0:
        raise ValueError("its bounds do not fit its keys")
    return table


def _agrees(path: str, table: TarTable, size: int) -> bool:
    """Whether the headers of the shard's first and last members name the table's key and field
    and carry its sizes, and a zero block follows the last member's data."""
    if not len(table):
        return False
    last = table.bounds[-1] - 1
    end = table.offsets[last] + -(-table.sizes[last] // BLOCK) * BLOCK
    if table.offsets[0] < BLOCK or end + BLOCK > size:
        return False
    with open(path, "rb", buffering=0) as file:
        descriptor = file.fileno()
        for sample, member in ((0, 0), (len(table) - 1, last)):
            header = os.pread(descriptor, BLOCK, table.offsets[member] - BLOCK)
            name = f"{table.keys[sample]}.{table.fields[member]}".encode()
            if not _says(header, name, table.sizes[member]):
                return False
        return not any(os.pread(descriptor, BLOCK, end))


def _says(header: bytes, name: bytes, size: int) -> bool:
    """Whether a ustar ``header`` is a regular file named ``name`` of ``size`` bytes."""
    if len(header) < BLOCK or header[:100].rstrip(b"\0") != name or header[345:500].strip(b"\0"):
        return False
    try:
        return int(header[124:136].strip(b"\0 ") or b"0", 8) == size and header[156:157] in (b"0", b"\0")
    except ValueError:
        return False
