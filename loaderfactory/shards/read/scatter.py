"""A shuffled batch of local tar samples read with one ``preadv`` per sample and no per-sample plan.

In a shuffled batch nearly every sample is its own run, so the run reader
(:mod:`loaderfactory.shards.formats.tar.stacked`) plans and checks each sample alone, which costs
more than the read itself for 4 KB samples. Shards written by ``pack`` or webdataset's
``ShardWriter`` give every sample the same members at the same offsets from its first member's data
(a :class:`Template`, found once per shard from its table). Then a sample is one ``preadv``: a short
one whole into a scratch row (:data:`WHOLE`; its stacked fields' data copied out of all the rows at
once), a longer one as a fixed list of pieces (the bytes around each stacked field into a scratch
row, the field's data straight into its row of the batch tensor); the ``.npy`` headers of the whole
batch are compared at once. Anything that does not fit (a remote shard, a sample that differs, a
short read, a field that does not decode) gives None: the caller reads the batch as usual, and any
error is raised there, naming the sample.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from loaderfactory.components.data.stacked import StackedItems, batch_tensor
from loaderfactory.shards.formats.tar.shard import TarShard
from loaderfactory.shards.formats.tar.stacked import IOV_MAX, NpyLayout, stackable_fields
from loaderfactory.shards.read.protocols import BatchSource

if TYPE_CHECKING:
    from loaderfactory.shards.formats.tar.table import TarTable

SCATTERED = 0.5
"""A batch is read this way when its runs of consecutive samples number more than this share of its
samples (a shuffled batch: nearly one run per sample); longer runs read better as one span each."""
WHOLE = 32 * 1024
"""A sample whose span is at most this many bytes is read whole into its scratch row, and the
stacked fields' data copied from the rows into the batch tensors at once: one buffer a read, which
costs less than cutting the span into pieces when the data is small."""


class Template(NamedTuple):
    """Every sample of a shard: these members at these offsets from the sample's first member's data."""

    fields: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int | None, ...]
    """Each member's size where every sample's is the same; None where they differ."""
    span: int
    """The bytes read from a sample's start: up to the furthest end of any sample's last member."""


class _Pieces(NamedTuple):
    """How one sample's span is cut: scratch lengths between the stacked fields' data, in order."""

    fields: tuple[str, ...]
    """The stacked fields, in the order their data lies in the sample."""
    scratch: tuple[int, ...]
    """Scratch bytes before each stacked field's data and after the last (one more than fields)."""
    members: tuple[tuple[str, int, int], ...]
    """Each member in order: field, offset in the scratch row (-1: a stacked field, in its batch
    row), member number in the template."""
    headers: tuple[tuple[int, bytes], ...]
    """Each stacked field's ``.npy`` header: offset in the scratch row, the bytes it must be."""


def _find_template(table: TarTable) -> Template | None:
    count = len(table)
    if not count:
        return None
    members = table.bounds[1] - table.bounds[0]
    if members < 1 or table.bounds[-1] != count * members:
        return None
    bounds = np.asarray(table.bounds, dtype=np.int64)
    if not (np.diff(bounds) == members).all() or table.fields != table.fields[:members] * count:
        return None
    offsets = np.asarray(table.offsets, dtype=np.int64).reshape(count, members)
    relative = offsets - offsets[:, :1]
    if not (relative == relative[0]).all():
        return None
    sizes = np.asarray(table.sizes, dtype=np.int64).reshape(count, members)
    same = (sizes == sizes[0]).all(axis=0).tolist()
    constant = tuple(int(size) if fixed else None for size, fixed in zip(sizes[0], same, strict=True))
    ends = relative[:, -1] + sizes[:, -1]
    return Template(tuple(table.fields[:members]), tuple(relative[0].tolist()), constant, int(ends.max()))


def _pieces(shape: Template, layouts: dict[str, NpyLayout]) -> _Pieces | None:
    """The cut of ``shape``'s span for ``layouts``; None when a stacked member's size is not its
    layout's in every sample."""
    stacked: list[str] = []
    scratch: list[int] = []
    members: list[tuple[str, int, int]] = []
    headers: list[tuple[int, bytes]] = []
    position = skipped = 0  # the next byte of the span not yet cut; data bytes that went to rows
    for number, (field, offset) in enumerate(zip(shape.fields, shape.offsets, strict=True)):
        layout = layouts.get(field)
        if layout is None:
            members.append((field, offset - skipped, number))
            continue
        members.append((field, -1, number))
        if shape.sizes[number] != layout.size:
            return None
        header = len(layout.header)
        scratch.append(offset + header - position)
        headers.append((offset - skipped, layout.header))
        stacked.append(field)
        skipped += layout.size - header
        position = offset + layout.size
    scratch.append(shape.span - position)
    if len(stacked) != len(layouts) or 2 * len(stacked) + 1 > IOV_MAX:
        return None
    return _Pieces(tuple(stacked), tuple(scratch), tuple(members), tuple(headers))


class _Reading(NamedTuple):
    """How a shard's samples are read scattered: its template and stacked fields' layouts (from its
    first sample), the cut of its span, where each scratch piece starts in a scratch row (the last:
    the row's width), each member as (field, offset in a whole span or -1 for a stacked field,
    member number), and per sample where its span starts and how many of its bytes must be read."""

    template: Template
    layouts: dict[str, NpyLayout]
    pieces: _Pieces
    starts: list[int]
    members: tuple[tuple[str, int, int], ...]
    firsts: list[int]
    needs: list[int]
    decoders: dict[str, Any]
    """What decodes each member that is not stacked."""
    stacks: tuple[Any, ...]
    """What the batch's shards must share: the stacked fields' layouts, their headers' places in a
    scratch row cut into pieces and in a whole span (one object for equal values, compared by ``is``)."""
    plans: dict[tuple[Any, ...], tuple[Any, ...]]
    """Each :func:`_plan` made for the shard, by its item keys and cut."""


_readings: weakref.WeakKeyDictionary[TarShard, _Reading | None] = weakref.WeakKeyDictionary()


def _reading(shard: TarShard) -> _Reading | None:
    """``shard``'s :class:`_Reading` (worked out once per shard and process); None where its
    samples do not share a template or its first sample has no field to stack."""
    if shard in _readings:
        return _readings[shard]
    table = shard.samples
    shape, found = _find_template(table), None
    layouts = stackable_fields(shard, 0) if shape is not None and len(shard) else {}
    pieces = None if shape is None or not layouts else _pieces(shape, layouts)
    if shape is not None and pieces is not None:
        bounds = np.asarray(table.bounds, dtype=np.int64)
        offsets = np.asarray(table.offsets, dtype=np.int64)
        sizes = np.asarray(table.sizes, dtype=np.int64)
        firsts, lasts = offsets[bounds[:-1]], bounds[1:] - 1
        needs = offsets[lasts] + sizes[lasts] - firsts
        members = tuple(
            (field, -1 if field in layouts else at, number)
            for number, (field, at) in enumerate(zip(shape.fields, shape.offsets, strict=True))
        )
        starts = np.cumsum((0, *pieces.scratch)).tolist()
        decoders = {field: shard.decoder(field) for field, at, _ in members if at >= 0}
        stacked_at = tuple(
            at for field, at in zip(shape.fields, shape.offsets, strict=True) if field in layouts
        )
        stacks = (tuple(layouts.items()), pieces.headers, stacked_at)
        stacks = _STACKS.setdefault(stacks, stacks)  # the one object for these values
        found = _Reading(
            shape, layouts, pieces, starts, members, firsts.tolist(), needs.tolist(), decoders, stacks, {}
        )
    _readings[shard] = found
    return found


_STACKS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
"""Each distinct :attr:`_Reading.stacks`, kept once (a handful a process)."""


class _Group(NamedTuple):
    """A shard's samples in the batch: the shard, its reading, its file, its URL and, where items
    are its fields renamed, each field's key."""

    tar: TarShard
    reading: _Reading
    descriptor: int
    url: str
    keys: tuple[str, ...] | None


def read_scattered(dataset: BatchSource, indices: Sequence[int], shard_of: Sequence[int]) -> list[Any] | None:
    """The samples at global ``indices`` (in shards ``shard_of``, each opened here once), their
    stacked ``.npy`` fields read into batch tensors; None where the batch does not fit."""
    length, ends, shape = len(dataset), dataset.ends, dataset.shape
    positions = [index + length if index < 0 else index for index in indices]
    places_of: dict[int, list[int]] = {}
    for place, shard in enumerate(shard_of):
        places_of.setdefault(shard, []).append(place)
    groups: list[_Group] = []
    group_of = [0] * len(indices)
    locals_ = [0] * len(indices)
    for number, (shard, places) in enumerate(places_of.items()):
        low = ends[shard - 1] if shard else 0
        first, last = positions[places[0]], positions[places[-1]]
        tar = dataset.open_run(shard, first, last).tar()
        if tar is None or (descriptor := tar.file()) < 0:
            return None
        reading = _reading(tar)
        if reading is None:
            return None
        keys = shape.renamed_keys(reading.template.fields)
        groups.append(_Group(tar, reading, descriptor, dataset.shards[shard].url, keys))
        for place in places:
            group_of[place], locals_[place] = number, positions[place] - low
    batch = _Batch.of(groups, len(indices))
    samples = None if batch is None else batch.read(groups, group_of, locals_)
    if batch is None or samples is None:
        return None
    if groups[0].keys is None:
        samples = [shape(sample, groups[group].url) for sample, group in zip(samples, group_of, strict=True)]
    if shape.keys and any(shape.absent(item) for item in samples):
        return None  # read as usual, which raises the error naming the sample
    dataset.counters.add("samples", len(samples))
    if shape.single:  # a single-value item is the row itself: collated as usual, the rows stacked again
        return samples
    return StackedItems(samples, {shape.field_of(field): tensor for field, tensor in batch.tensors.items()})


class _Batch:
    """The batch tensors, a scratch row per sample, and the reads.

    A short sample (:data:`WHOLE`) is read whole into its scratch row, and each stacked field's data
    copied from the rows into its batch tensor at once; a longer one's pieces go straight where they
    belong (the bytes around each stacked field's data into the scratch row, the data into its row
    of the batch tensor: no second copy)."""

    def __init__(self, first: _Reading, count: int, whole: bool, width: int) -> None:
        layouts = first.layouts
        self.fields = first.pieces.fields
        self.whole = whole
        self.tensors = {
            field: batch_tensor((count, *layouts[field].shape), layouts[field].dtype) for field in self.fields
        }
        self.byte_rows = [
            self.tensors[field].view(count, -1).view(torch.uint8).numpy() for field in self.fields
        ]
        self.rows = [self.tensors[field].unbind(0) for field in self.fields]
        self.scratch = np.empty((count, width), np.uint8)
        self.flat = memoryview(self.scratch.reshape(-1))  # type: ignore[arg-type]
        self.headers = first.pieces.headers
        """Each stacked field's ``.npy`` header: its offset in a scratch row, the bytes it must be."""
        if whole:  # the header starts the member: at the member's offset in the span
            at = first.stacks[2]
            self.headers = tuple((start, header) for start, (_, header) in zip(at, self.headers, strict=True))

    @classmethod
    def of(cls, groups: list[_Group], count: int) -> _Batch | None:
        """The batch for ``groups``; None where their shards do not stack the same fields with the
        same headers at the same places."""
        first = groups[0].reading
        whole, stacks = first.template.span <= WHOLE, first.stacks
        if any(group.reading.stacks is not stacks for group in groups):
            return None
        if whole:
            width = max(group.reading.template.span for group in groups)
        else:
            width = max(group.reading.starts[-1] for group in groups)
        return cls(first, count, whole, width)

    def read(self, groups: list[_Group], group_of: list[int], locals_: list[int]) -> list[Any] | None:
        """Each sample (``locals_[place]`` of ``groups[group_of[place]]``) read into its rows: an
        item where its group has keys, else its stored fields and ``__key__``; None where a sample
        falls short, a field does not decode or a header differs."""
        got = [0] * len(groups)
        samples = self._read_samples(groups, group_of, locals_, got)
        for group, count in zip(groups, got, strict=True):
            group.tar.storage.stats.add("bytes_local", count)
        if samples is None or not self._headers_match():
            return None
        if self.whole:
            for byte_row, (at, header) in zip(self.byte_rows, self.headers, strict=True):
                start = at + len(header)
                byte_row[:] = self.scratch[:, start : start + byte_row.shape[1]]
        return samples

    def _read_samples(
        self, groups: list[_Group], group_of: list[int], locals_: list[int], got: list[int]
    ) -> list[Any] | None:
        flat, width, rows = self.flat, self.scratch.shape[1], self.rows
        whole = self.whole
        plans = [_plan(group, self.fields, whole) for group in groups]
        # Where a sample's bytes go: scratch pieces (the whole span, or the bytes before the first
        # stacked field's data), each stacked field's row of the batch tensor then the piece after it.
        cuts = [[(0, width)] if whole else list(itertools.pairwise(group.reading.starts)) for group in groups]
        byte_rows = () if whole else self.byte_rows
        preadv = os.preadv
        samples: list[Any] = []
        try:
            for place, (number, local) in enumerate(zip(group_of, locals_, strict=True)):
                descriptor, firsts, needs, bounds, sizes, keys, members = plans[number]
                (at, end), *around = cuts[number]
                begin = place * width
                buffers: list[Any] = [flat[begin + at : begin + end]]
                for byte_row, (at, end) in zip(byte_rows, around, strict=True):
                    buffers += [byte_row[place], flat[begin + at : begin + end]]
                count = preadv(descriptor, buffers, firsts[local])
                got[number] += count
                if count < needs[local]:
                    return None
                first = bounds[local]
                sample = {} if keys is None else {"__key__": keys[local]}
                for name, at, member, decode in members:
                    if decode is None:
                        sample[name] = rows[member][place]
                    else:
                        at += begin
                        sample[name] = decode(flat[at : at + sizes[first + member]])
                samples.append(sample)
        except Exception:  # noqa: BLE001 - read as usual, which raises the error naming the sample
            return None
        return samples

    def _headers_match(self) -> bool:
        """Whether every row's ``.npy`` headers are the ones its layout was taken from."""
        return all(
            (self.scratch[:, at : at + len(header)] == np.frombuffer(header, np.uint8)).all()
            for at, header in self.headers
        )


def _plan(group: _Group, stacked: tuple[str, ...], whole: bool) -> tuple[Any, ...]:
    """How ``group``'s samples are read: its file, each sample's span start and the bytes it must
    have, its table's member bounds and sizes, its sample keys (None where items are its fields
    renamed, which take no ``__key__``), and each member as (its name in the sample or item, its
    offset in a scratch row, its member number or for a stacked field its place in ``stacked``,
    its decoder or None for a stacked field)."""
    reading, table = group.reading, group.tar.samples
    plan = reading.plans.get((group.keys, whole))
    if plan is not None:
        return plan
    names = group.keys or reading.template.fields
    members = reading.members if whole else reading.pieces.members
    cuts = tuple(
        (name, at, stacked.index(field), None) if at < 0 else (name, at, member, reading.decoders[field])
        for name, (field, at, member) in zip(names, members, strict=True)
    )
    keys = None if group.keys is not None else table.keys
    plan = (group.descriptor, reading.firsts, reading.needs, table.bounds, table.sizes, keys, cuts)
    reading.plans[group.keys, whole] = plan
    return plan
