"""A seekable, buffered file object over any URL, so tarfile and pyarrow read remote shards as files."""

from __future__ import annotations

import io
from typing import BinaryIO

from loaderfactory.shards.storage.remote_errors import missing
from loaderfactory.shards.storage.store import Storage, split_scheme

BLOCK_BYTES = 1 << 20
"""Read-ahead per remote request: a header walk over small members then costs one request per MiB."""


class RangeFile(io.RawIOBase):
    """Reads of a remote object become byte-range requests; seeks cost nothing until the next read."""

    def __init__(self, storage: Storage, url: str, size: int | None = None) -> None:
        self.storage, self.url = storage, url
        self.size = storage.size(url) if size is None else size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        # io.RawIOBase types the argument as a buffer protocol object; these two are what io passes.
        end = min(self.size, self.position + len(buffer))
        data = self.storage.read_range(self.url, self.position, end)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def open_shard(storage: Storage, url: str, size: int | None = None) -> BinaryIO:
    """A buffered binary file of ``url``: the file itself when local, range reads when remote."""
    scheme, rest = split_scheme(url)
    if scheme == "file":
        try:
            return storage.stats.open(rest)  # its reads counted where a dataset counts them
        except FileNotFoundError:
            raise missing(url) from None
    raw = RangeFile(storage, url, size)
    return io.BufferedReader(raw, buffer_size=BLOCK_BYTES)
