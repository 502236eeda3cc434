"""The sample table of a tar shard: flat lists of its members, grouped into samples.

A shard of 4 KB samples has tens of thousands of members. Kept as one object per sample, its table
costs a microsecond or more per sample to build and, being many live objects, makes each of
Python's full garbage collections slower for as long as the shard is open. Here a shard's table is
a few flat lists (strings and integers, which the collector does not follow), and
:class:`TarSample` objects are made only when asked for.
"""

from __future__ import annotations

from collections.abc import Iterator


class TarSample:
    """Where a sample's fields lie in its shard: field → (offset, size) of the member's data, and
    the byte range from its first member's data to its last member's end."""

    __slots__ = ("end", "fields", "key", "start")

    def __init__(self, key: str, fields: dict[str, tuple[int, int]], start: int, end: int) -> None:
        self.key, self.fields, self.start, self.end = key, fields, start, end

    @property
    def span(self) -> tuple[int, int]:
        """The byte range that covers every field, read in one request."""
        return self.start, self.end


class TarTable:
    """The samples of a tar shard, in the order they lie in it.

    Sample ``i`` is ``keys[i]`` and the members ``bounds[i]`` to ``bounds[i + 1] - 1`` of the flat
    ``fields``, ``offsets`` and ``sizes`` lists; no field appears twice in a sample (the readers
    refuse such a shard: see :meth:`repeats`).
    """

    __slots__ = ("bounds", "fields", "keys", "offsets", "sizes")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.bounds: list[int] = [0]
        self.fields: list[str] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []

    def add(self, key: str, field: str, offset: int, size: int) -> None:
        """A member; one whose key differs from the last member's starts a new sample."""
        if not self.keys or self.keys[-1] != key:
            self.keys.append(key)
            self.bounds.append(self.bounds[-1])
        self.fields.append(field)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.bounds[-1] += 1

    def repeats(self, key: str, field: str) -> bool:
        """Whether a member ``key.field`` would repeat a field of the last sample: two samples with
        the same key in a row, or a field written twice (webdataset's "duplicate file name")."""
        return bool(self.keys) and self.keys[-1] == key and field in self.fields[self.bounds[-2] :]

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]  # the empty table again

    def __len__(self) -> int:
        return len(self.keys)

    def start(self, index: int) -> int:
        """Where sample ``index``'s first member's data starts."""
        return self.offsets[self.bounds[index]]

    def end(self, index: int) -> int:
        """Where sample ``index``'s last member's data ends."""
        last = self.bounds[index + 1] - 1
        return self.offsets[last] + self.sizes[last]

    def __getitem__(self, index: int) -> TarSample:
        first, stop = self.bounds[index], self.bounds[index + 1]
        fields = {self.fields[m]: (self.offsets[m], self.sizes[m]) for m in range(first, stop)}
        return TarSample(self.keys[index], fields, self.start(index), self.end(index))

    def __iter__(self) -> Iterator[TarSample]:
        return (self[index] for index in range(len(self)))
