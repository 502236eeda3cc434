"""A shuffled batch of local tar samples read with one ``preadv`` per sample and no per-sample plan.

In a shuffled batch nearly every sample is its own run, so the run reader (:mod:`.tar_stacked`)
plans and checks each sample alone, which costs more than the read itself for 4 KB samples. Shards
written by ``pack`` or webdataset's ``ShardWriter`` give every sample the same members at the same
offsets from its first member's data (a :class:`Template`, found once per shard from its table).
Then a sample is one ``preadv`` of a fixed list of pieces (the bytes around each stacked field into
a scratch row, the field's data straight into its row of the batch tensor), and the ``.npy``
headers of the whole batch are compared at once. Anything that does not fit (a remote shard, a
sample that differs, a short read, a field that does not decode) gives None: the caller reads the
batch as usual, and any error is raised there, naming the sample.
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
from loaderfactory.shards.tar_format import TarShard
from loaderfactory.shards.tar_stacked import IOV_MAX, NpyLayout, stackable_fields

if TYPE_CHECKING:
    from loaderfactory.shards.dataset import ShardsDataset
    from loaderfactory.shards.tar_table import TarTable

SCATTERED = 0.5
"""A batch is read this way when its runs of consecutive samples number more than this share of its
samples (a shuffled batch: nearly one run per sample); longer runs read better as one span each."""


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


class _Cut(NamedTuple):
    """How a shard's samples are read: its stacked fields' layouts (from its first sample), the cut
    of its span, and where each scratch piece starts in a scratch row (the last: the row's width)."""

    layouts: dict[str, NpyLayout]
    pieces: _Pieces
    starts: list[int]


_cuts: weakref.WeakKeyDictionary[TarShard, _Cut | None] = weakref.WeakKeyDictionary()


def _cut(shard: TarShard) -> _Cut | None:
    """``shard``'s :class:`_Cut` (worked out once per shard and process); None where its samples do
    not share a template or its first sample has no field to stack."""
    if shard in _cuts:
        return _cuts[shard]
    shape, found = _find_template(shard.samples), None
    layouts = stackable_fields(shard, 0) if shape is not None and len(shard) else {}
    pieces = None if shape is None or not layouts else _pieces(shape, layouts)
    if pieces is not None:
        found = _Cut(layouts, pieces, np.cumsum((0, *pieces.scratch)).tolist())
    _cuts[shard] = found
    return found


def read_scattered(
    dataset: ShardsDataset, indices: Sequence[int], shard_of: Sequence[int]
) -> list[Any] | None:
    """The samples at global ``indices`` (in shards ``shard_of``, each opened here once), their
    stacked ``.npy`` fields read into batch tensors; None where the batch does not fit."""
    from loaderfactory.shards.batch_read import _open_run  # batch_read imports this module

    groups: dict[int, list[int]] = {}
    for place, shard in enumerate(shard_of):
        groups.setdefault(shard, []).append(place)
    length = len(dataset)
    positions = [index + length if index < 0 else index for index in indices]
    out: list[dict[str, Any] | None] = [None] * len(indices)
    batch: _Batch | None = None
    for shard, places in groups.items():
        low = dataset._ends[shard - 1] if shard else 0
        locals_ = [positions[place] - low for place in places]
        opened = _open_run(dataset, [positions[place] for place in places], shard, locals_[0])
        tar = getattr(opened, "shard", opened)  # a cached copy's reader, or the shard's own
        if not isinstance(tar, TarShard) or tar.file() < 0:
            return None
        cut = _cut(tar)
        if cut is None:
            return None
        if batch is None:
            batch = _Batch(cut, len(indices))
        if not batch.read(tar, cut, places, locals_, out):
            return None
    if batch is None or not batch.headers_match():
        return None
    return _as_items(dataset, groups, out, batch.tensors)


def _as_items(
    dataset: ShardsDataset,
    groups: dict[int, list[int]],
    samples: list[dict[str, Any] | None],
    tensors: dict[str, torch.Tensor],
) -> list[Any] | None:
    """The read ``samples`` as the dataset's items (renamed to the packed item, or given their
    ``__url__``), shard by shard, over the batch ``tensors``; None where one lacks a key it must have
    (read as usual, which raises the error naming the sample)."""
    shape = dataset.shape
    items: list[Any] = [None] * len(samples)
    for shard, places in groups.items():
        read = [sample for place in places if (sample := samples[place]) is not None]
        for place, item in zip(places, shape.items(read, dataset.shards[shard].url), strict=True):
            items[place] = item
    if shape.keys and any(shape.absent(item) for item in items):
        return None
    dataset.counters.add("samples", len(items))
    if shape.single:  # a single-value item is the row itself: collated as usual, the rows stacked again
        return items
    return StackedItems(items, {shape.field_of(field): tensor for field, tensor in tensors.items()})


class _Batch:
    """The batch tensors, a scratch row per sample for the bytes around their data, and the reads."""

    def __init__(self, cut: _Cut, count: int) -> None:
        self.cut = cut
        layouts = cut.layouts
        self.tensors = {
            field: batch_tensor((count, *layouts[field].shape), layouts[field].dtype)
            for field in cut.pieces.fields
        }
        self.byte_rows = [
            self.tensors[field].view(count, -1).view(torch.uint8).numpy() for field in cut.pieces.fields
        ]
        self.rows = {field: tensor.unbind(0) for field, tensor in self.tensors.items()}
        self.scratch = np.empty((count, cut.starts[-1]), np.uint8)

    def fits(self, cut: _Cut) -> bool:
        """Whether ``cut`` stacks the batch's fields with its headers at the same places in a
        scratch row; the rows grow when its span is longer (another shard's last members may be
        longer: a label of more digits, longer JSON)."""
        first = self.cut
        if cut is not first and (cut.layouts != first.layouts or cut.pieces.headers != first.pieces.headers):
            return False
        width = self.scratch.shape[1]
        if cut.starts[-1] > width:  # rows read so far keep their bytes (decoded fields may view them)
            wider = np.empty((len(self.scratch), cut.starts[-1]), np.uint8)
            wider[:, :width] = self.scratch
            self.scratch = wider
        return True

    def read(
        self,
        tar: TarShard,
        cut: _Cut,
        places: list[int],
        locals_: list[int],
        out: list[dict[str, Any] | None],
    ) -> bool:
        """Samples ``locals_`` of ``tar`` into batch rows ``places``; False where ``cut`` does not
        fit the batch, a sample falls short, or a field does not decode."""
        if not self.fits(cut):
            return False
        pieces, starts = cut.pieces, cut.starts
        table, descriptor = tar.samples, tar.file()
        keys, bounds, offsets, sizes = table.keys, table.bounds, table.offsets, table.sizes
        decoders = {field: tar.decoder(field) for field, at, _ in pieces.members if at >= 0}
        rows, byte_rows, members = self.rows, self.byte_rows, pieces.members
        pairs = list(itertools.pairwise(starts[1:]))
        head, last_member = slice(0, starts[1]), len(members) - 1
        read = 0
        for place, local in zip(places, locals_, strict=True):
            scratch = memoryview(self.scratch[place])
            buffers: list[Any] = [scratch[head]]
            for byte_row, (begin, end) in zip(byte_rows, pairs, strict=True):
                buffers += [byte_row[place], scratch[begin:end]]
            first = bounds[local]
            start = offsets[first]
            got = os.preadv(descriptor, buffers, start)
            read += got
            if got < offsets[first + last_member] + sizes[first + last_member] - start:
                return False
            sample: dict[str, Any] = {"__key__": keys[local]}
            for field, at, number in members:
                if at < 0:
                    sample[field] = rows[field][place]
                    continue
                try:
                    sample[field] = decoders[field](scratch[at : at + sizes[first + number]])
                except Exception:  # noqa: BLE001 - read as usual, which raises the error naming the sample
                    return False
            out[place] = sample
        tar.storage.stats.add("bytes_local", read)
        return True

    def headers_match(self) -> bool:
        """Whether every row's ``.npy`` headers are the ones its layout was taken from."""
        return all(
            (self.scratch[:, at : at + len(header)] == np.frombuffer(header, np.uint8)).all()
            for at, header in self.cut.pieces.headers
        )
