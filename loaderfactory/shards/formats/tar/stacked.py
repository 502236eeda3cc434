"""A run of a local tar shard's samples read with one ``preadv``, each fixed-size ``.npy`` field's
data landing straight in its row of a batch tensor.

The field's layout (its ``.npy`` header: dtype and shape) is taken from one sample; every other
sample's member must be as large and carry the same header byte for byte (its header is read beside
the data and compared), else the run is not read this way (None: the caller reads it as usual, and
any error is raised there). Everything between the rows (tar headers, padding, other fields) is
read into one scratch buffer, from which the other fields are decoded as usual.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from loaderfactory.shards.formats.npy import parsed_header

if TYPE_CHECKING:
    from loaderfactory.shards.formats.tar.shard import TarShard
    from loaderfactory.shards.formats.tar.table import TarTable

HEADER_READ = 4096
"""Bytes read to find a member's ``.npy`` header (numpy writes 128 for most arrays)."""
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
"""The most buffers one ``preadv`` fills."""


class NpyLayout(NamedTuple):
    """What every member of a stacked field holds: this header, then the array's bytes."""

    header: bytes
    dtype: torch.dtype
    shape: tuple[int, ...]
    size: int
    """The member's bytes: header and data."""


class Target(NamedTuple):
    """Where a field's data goes: its layout, the batch tensor, and its rows as bytes and as tensors."""

    layout: NpyLayout
    tensor: torch.Tensor
    byte_rows: np.ndarray
    rows: tuple[torch.Tensor, ...]


def npy_layout(shard: TarShard, member: int) -> NpyLayout | None:
    """The layout of ``member`` (a member number) when its array can be read into a row: a dtype
    torch reads as is, C order, at least one element, nothing after the data; None otherwise."""
    table = shard.samples
    offset, size = table.offsets[member], table.sizes[member]
    head = shard.read(offset, offset + min(size, HEADER_READ))
    try:
        parsed = parsed_header(head)
    except ValueError:
        return None
    if parsed is None:
        return None
    dtype, shape, fortran, start, torch_dtype = parsed
    count = math.prod(shape)
    if torch_dtype is None or (fortran and len(shape) > 1) or not count or start > len(head):
        return None
    if start + count * dtype.itemsize != size:
        return None
    return NpyLayout(bytes(head[:start]), torch_dtype, shape, size)


def stackable_fields(shard: TarShard, index: int) -> dict[str, NpyLayout]:
    """The ``.npy`` fields of sample ``index`` that decode to tensors and can be read into rows."""
    table = shard.samples
    members = range(table.bounds[index], table.bounds[index + 1])
    names = [table.fields[member] for member in members]
    layouts: dict[str, NpyLayout] = {}
    for member, field in zip(members, names, strict=True):
        if names.count(field) == 1 and shard.decodes_npy(field):
            layout = npy_layout(shard, member)
            if layout is not None:
                layouts[field] = layout
    return layouts


def read_rows(
    shard: TarShard, first: int, count: int, targets: dict[str, Target], row: int
) -> list[Any] | None:
    """Samples ``first`` to ``first + count - 1``, their ``targets`` fields read into rows ``row``
    onwards; None when the shard is not a local file or a sample does not fit the layouts."""
    descriptor = shard.file()
    if descriptor < 0:
        return None
    per_read = max(1, (IOV_MAX - 1) // (2 * len(targets)))
    out: list[Any] = []
    for begin in range(first, first + count, per_read):
        stop = min(begin + per_read, first + count)
        samples = _read_group(shard, descriptor, begin, stop, targets, row + begin - first)
        if samples is None:
            return None
        out.extend(samples)
    return out


Plan = list[tuple[str, int, int]]
"""A sample's members in order: (field, offset in the scratch buffer or -1 for a row, size)."""


class _Group(NamedTuple):
    """How one ``preadv`` reads a group of samples."""

    buffers: list[Any]
    """Where each piece of the byte range goes, in order: the scratch buffer's slices and rows."""
    headers: list[tuple[int, bytes]]
    """Where each row's ``.npy`` header lies in the scratch buffer, and what it must be."""
    plans: list[Plan]


def _read_group(
    shard: TarShard, descriptor: int, first: int, stop: int, targets: dict[str, Target], row: int
) -> list[dict[str, Any]] | None:
    table = shard.samples
    start, end = table.start(first), table.end(stop - 1)
    payload = sum(target.layout.size - len(target.layout.header) for target in targets.values())
    scratch = memoryview(np.empty(end - start - (stop - first) * payload, np.uint8))  # type: ignore[arg-type]
    group = _plan(table, first, stop, targets, row, scratch)
    if group is None:
        return None
    got = os.preadv(descriptor, group.buffers, start)
    shard.storage.stats.add("bytes_local", got)
    if got != end - start:
        return None
    for at, header in group.headers:
        if bytes(scratch[at : at + len(header)]) != header:
            return None
    out = []
    for place, (index, plan) in enumerate(zip(range(first, stop), group.plans, strict=True)):
        sample: dict[str, Any] = {"__key__": table.keys[index]}
        for field, at, size in plan:
            if at < 0:
                sample[field] = targets[field].rows[row + place]
                continue
            try:
                sample[field] = shard.decoder(field)(scratch[at : at + size])
            except Exception:  # noqa: BLE001 - read as usual, which raises the error naming the sample
                return None
        out.append(sample)
    return out


def _plan(
    table: TarTable, first: int, stop: int, targets: dict[str, Target], row: int, scratch: memoryview
) -> _Group | None:
    """The buffers for samples ``first`` to ``stop - 1``; None when one does not fit ``targets``."""
    bounds, fields, offsets, sizes = table.bounds, table.fields, table.offsets, table.sizes
    start = table.start(first)
    group = _Group([], [], [])
    position, skipped = start, 0  # the next byte to read; bytes before it that went to rows
    for index in range(first, stop):
        plan: Plan = []
        stacked = 0
        for member in range(bounds[index], bounds[index + 1]):
            field, offset, size = fields[member], offsets[member], sizes[member]
            target = targets.get(field)
            if target is None:
                plan.append((field, offset - start - skipped, size))
                continue
            header = target.layout.header
            if size != target.layout.size:
                return None
            at = offset - start - skipped
            group.buffers.append(scratch[position - start - skipped : at + len(header)])
            group.buffers.append(target.byte_rows[row + index - first])
            group.headers.append((at, header))
            skipped += size - len(header)
            position = offset + size
            plan.append((field, -1, size))
            stacked += 1
        if stacked != len(targets):
            return None  # a stacked field missing from this sample, or named twice
        group.plans.append(plan)
    group.buffers.append(scratch[position - start - skipped :])
    return group
