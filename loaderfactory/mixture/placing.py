"""Where each position of an epoch reads: its source, the pass over that source, and the sample.

A position's *key* is ``source * PASS_STRIDE + pass``, its pass counted within the epoch; the pass
number a source is told is ``epoch * PASS_STRIDE + pass``. Positions are placed a span at a time (a
chunk of blocks, :mod:`~loaderfactory.mixture.blocks`): a source's positions in a span read a run of
its order, pass by pass, so the span is a few groups, each a run of offsets and of sample indices. A
batch of consecutive positions (what a loader asks) or of every ``n``-th one (a rank's part) is cut
from its span.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from loaderfactory.mixture.orders import SourceOrders
from loaderfactory.mixture.timeline import Timeline

PASS_STRIDE = 2**20
"""Pass numbers of one epoch's passes over a source start at ``epoch * PASS_STRIDE``."""


class Group(NamedTuple):
    """Positions of a batch that read one pass of one source: the key, the slot in the batch of the
    first of them, and the sample indices they read, in the batch's order."""

    key: int
    first: int
    indices: list[int]


class Placed(NamedTuple):
    """A batch's groups, and ``back``: where each slot's item is among the groups' items read one
    group after another (None: in order)."""

    groups: list[Group]
    back: list[int] | None


class SpanGroup(NamedTuple):
    """The positions of a span that read one pass of one source: their offsets in the span, in
    order, and the sample indices they read."""

    key: int
    offsets: np.ndarray
    indices: np.ndarray


class Span:
    """Every position of a span, placed, as its groups, with what cuts a run of offsets from them
    without a search: each offset's group and rank in it, and each group's count before each offset."""

    def __init__(self, start: int, size: int, groups: list[SpanGroup]) -> None:
        self.start = start
        self.size = size
        self.groups = groups
        self.group_of = np.empty(size, dtype=np.int64)
        self.rank = np.empty(size, dtype=np.int64)
        self.before = np.zeros((size + 1, len(groups)), dtype=np.int64)
        for number, group in enumerate(groups):
            self.group_of[group.offsets] = number
            self.rank[group.offsets] = np.arange(len(group.offsets))
            self.before[group.offsets + 1, number] = 1
        np.cumsum(self.before, axis=0, out=self.before)

    def run(self, offset: int, count: int) -> Placed:
        """The groups of offsets ``offset ... offset + count - 1``."""
        end = offset + count
        lows, highs = self.before[offset].tolist(), self.before[end].tolist()
        groups, firsts, read = [], [0] * len(self.groups), 0
        for number, (low, high) in enumerate(zip(lows, highs, strict=True)):
            if low < high:
                key, offsets, indices = self.groups[number]
                groups.append(Group(key, int(offsets[low]) - offset, indices[low:high].tolist()))
                firsts[number], read = read, read + high - low
        if len(groups) == 1:
            return Placed(groups, None)
        # A slot's item is its group's first in the read, plus its rank in the group past the run's start.
        back = (np.asarray(firsts) - self.before[offset])[self.group_of[offset:end]] + self.rank[offset:end]
        return Placed(groups, back.tolist())

    @functools.cached_property
    def keys_and_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """Each offset's key and sample index."""
        keys = np.empty(self.size, dtype=np.int64)
        indices = np.empty(self.size, dtype=np.int64)
        for group in self.groups:
            keys[group.offsets] = group.key
            indices[group.offsets] = group.indices
        return keys, indices


class Placer:
    """Keys and sample indices of positions, grouped by key; whole spans kept (the last few)."""

    def __init__(self, timeline: Timeline, orders: SourceOrders, keep: int = 4) -> None:
        self.timeline = timeline
        self.orders = orders
        self._sizes = np.asarray(orders.sizes, dtype=np.int64)
        self._keep = keep
        self._spans: OrderedDict[tuple[int, int], Span] = OrderedDict()
        self._last: tuple[int, Span] | None = None

    def place(self, epoch: int, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, sample indices)`` of positions ``at`` (inside the epoch) of ``epoch``."""
        sources, draws = self.timeline.locate(epoch, at)
        passes, within = np.divmod(draws, self._sizes[sources])
        keys = sources * PASS_STRIDE + passes
        indices = np.empty_like(draws)
        for key in np.unique(keys).tolist():  # a source's pass: one order for all its draws
            here = keys == key
            source, taken = divmod(key, PASS_STRIDE)
            indices[here] = self.orders.order(source, epoch * PASS_STRIDE + taken)[within[here]]
        return keys, indices

    def groups(self, epoch: int, at: np.ndarray) -> Placed:
        """The groups of positions ``at`` (inside the epoch) of ``epoch``."""
        return _grouped(*self.place(epoch, at))

    def run(self, epoch: int, first: int, count: int, step: int = 1) -> Placed | None:
        """:meth:`groups` of ``first, first + step, ...`` (``count`` of them), cut from their span;
        None when they cross into the next span."""
        span = self._span_of(epoch, first)
        offset = first - span.start
        if count < 1 or offset + (count - 1) * step >= span.size:
            return None
        if step == 1:
            return span.run(offset, count)
        keys, indices = span.keys_and_indices
        end = offset + (count - 1) * step + 1
        return _grouped(keys[offset:end:step], indices[offset:end:step])

    def _span_of(self, epoch: int, position: int) -> Span:
        """The span holding ``position`` (the last one asked for, mostly)."""
        if self._last is not None:
            last_epoch, span = self._last
            if last_epoch == epoch and span.start <= position < span.start + span.size:
                return span
        number = self.timeline.chunk_of(epoch, position)
        kept = self._spans.get((epoch, number))
        if kept is None:
            kept = self._spans[(epoch, number)] = self._placed_span(epoch, number)
            if len(self._spans) > self._keep:
                self._spans.popitem(last=False)
        span = kept
        self._last = (epoch, span)
        return span

    def _placed_span(self, epoch: int, number: int) -> Span:
        """Span ``number``: the positions of its chunk's units, each source's cut where its passes end."""
        timeline = self.timeline
        chunk, per_unit = timeline.chunk(epoch, number), timeline.unit_sizes
        first_unit = number * timeline.blocks.chunk
        start = timeline.unit_start(epoch, first_unit)
        size = min(timeline.unit_start(epoch, first_unit + len(chunk.sources)), timeline.length) - start
        grouped, counted, before = chunk.grouped, chunk.counted * per_unit, chunk.before * per_unit
        if not (per_unit == 1).all():  # each unit's positions in turn; the epoch's last may be cut short
            lengths = per_unit[chunk.sources]
            starts = (np.cumsum(lengths) - lengths)[grouped]
            lengths = lengths[grouped]
            ends = np.cumsum(lengths)
            grouped = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
            if len(grouped) > size:
                counted[chunk.sources[-1]] -= len(grouped) - size
                grouped = grouped[grouped < size]
        groups = []
        firsts = (np.cumsum(counted) - counted).tolist()
        runs = zip(firsts, counted.tolist(), before.tolist(), self.orders.sizes, strict=True)
        for source, (first, count, draw, source_size) in enumerate(runs):
            for begin, end, pass_number in _passes(draw, count, source_size):
                order = self.orders.order(source, epoch * PASS_STRIDE + pass_number)
                within = draw + begin - pass_number * source_size  # the run's start in the pass's order
                offsets = grouped[first + begin : first + end]
                key = source * PASS_STRIDE + pass_number
                groups.append(SpanGroup(key, offsets, order[within : within + end - begin]))
        return Span(start, size, groups)


def _passes(draw: int, count: int, size: int) -> list[tuple[int, int, int]]:
    """Draws ``draw ... draw + count - 1`` of a source of ``size`` samples, cut where each pass over
    it ends: ``(first, end, pass)`` with ``first``/``end`` counted from ``draw``."""
    cut, first = [], 0
    while first < count:
        pass_number = (draw + first) // size
        end = min(count, (pass_number + 1) * size - draw)
        cut.append((first, end, pass_number))
        first = end
    return cut


def _grouped(keys: np.ndarray, indices: np.ndarray) -> Placed:
    """The groups of positions with ``keys`` that read ``indices``."""
    grouped = np.argsort(keys, kind="stable")
    ordered = keys[grouped]
    cuts = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(ordered)]
    taken, slots = indices[grouped].tolist(), grouped.tolist()
    groups = [Group(int(ordered[a]), slots[a], taken[a:b]) for a, b in itertools.pairwise(cuts)]
    if len(groups) == 1:
        return Placed(groups, None)
    back = np.empty_like(grouped)
    back[grouped] = np.arange(len(grouped))
    return Placed(groups, back.tolist())
