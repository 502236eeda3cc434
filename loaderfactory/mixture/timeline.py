"""A mixture's arithmetic: how long an epoch is, and which source and draw each position holds.

Positions are taken in units: one position each (``random`` and ``stratified`` batching), or one
global batch each (``per_source``: every batch from one source, of that source's size). The
schedule counts units along a timeline that runs on over epochs when the weights change with time,
and starts again each epoch when they are fixed (every epoch then holds the same counts).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from loaderfactory.mixture.blocks import CHUNK_POSITIONS, Blocks, Chunk
from loaderfactory.mixture.counts import Counts
from loaderfactory.mixture.epochs import Steps, Stop, epoch_length
from loaderfactory.mixture.schedule import Interpolate, segments


class Timeline:
    """Each epoch's positions: their sources and draw numbers, and each source's draws and target.

    Args:
        points: ``(at, weights)`` along the run, ``at`` in positions (samples), weights per source.
        interpolate: ``hold`` or ``linear`` between points.
        stop: the epoch's end (:data:`~loaderfactory.mixture.epochs.Stop`).
        sizes: samples in each source.
        block: units whose counts are exact, arranged at random.
        seed: the arrangements' seed.
        unit: positions per unit (a global batch for ``per_source`` batching, else 1); ``at`` of the
            points counts units of this size.
        unit_sizes: positions per unit of each source, where they differ (fixed weights only).
    """

    def __init__(
        self,
        points: Sequence[tuple[int, Sequence[float]]],
        interpolate: Interpolate,
        stop: Stop,
        sizes: Sequence[int],
        block: int,
        seed: int,
        unit: int = 1,
        unit_sizes: Sequence[int] | None = None,
    ) -> None:
        self.unit = unit
        self.unit_sizes = np.asarray(unit_sizes if unit_sizes is not None else [unit] * len(sizes), np.int64)
        self.uniform = bool((self.unit_sizes == unit).all())
        self.segments = segments([(at // unit, weights) for at, weights in points], interpolate)
        self.scheduled = len(self.segments.starts) > 1
        if self.scheduled and not self.uniform:
            raise ValueError("a schedule needs one batch size for all sources: an epoch's length would vary")
        self.counts = Counts(self.segments)
        if isinstance(stop, Steps):
            self.units = stop.steps
        elif isinstance(stop, int):
            if not self.uniform:
                raise ValueError("with a batch size per source, give the epoch's length in steps")
            self.units = -(-stop // unit)
        else:
            in_units = [-(-size // int(u)) for size, u in zip(sizes, self.unit_sizes, strict=True)]
            self.units = epoch_length(self.counts, in_units, self.segments.weights[0], stop)
        per_chunk = max(1, CHUNK_POSITIONS // (block * int(self.unit_sizes.max())))
        self.blocks = Blocks(self.counts, block, seed, per_chunk=per_chunk)
        self.length = stop if isinstance(stop, int) else self.unit_start(0, self.units)
        self._starts: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def start(self, epoch: int) -> int:
        """The unit ``epoch`` starts at on the timeline (0 for fixed weights: every epoch alike)."""
        return epoch * self.units if self.scheduled else 0

    def chunk(self, epoch: int, number: int) -> Chunk:
        """Chunk ``number`` of ``epoch``'s units (:class:`~loaderfactory.mixture.blocks.Chunk`)."""
        return self.blocks.find(epoch, self.start(epoch), self.units, number * self.blocks.chunk)

    # -- units and positions ------------------------------------------------------------------------

    def unit_start(self, epoch: int, unit: int) -> int:
        """The position unit ``unit`` of ``epoch`` starts at (the epoch's length for its last + 1)."""
        if self.uniform:
            return unit * self.unit
        number, within = divmod(unit, self.blocks.chunk)
        if within == 0 or unit >= self.units:  # a chunk's start: the counts before it, in closed form
            start = self.start(epoch)
            drawn = self.counts.at(start + min(unit, self.units)) - self.counts.at(start)
            return int(drawn @ self.unit_sizes)
        return int(self.chunk_starts(epoch, number)[within])

    def chunk_starts(self, epoch: int, number: int) -> np.ndarray:
        """Where each unit of chunk ``number`` starts, then where the chunk ends (positions)."""
        found = self._starts.get((epoch, number))
        if found is None:
            chunk = self.chunk(epoch, number)
            first = self.unit_start(epoch, number * self.blocks.chunk)
            found = np.concatenate([[first], first + np.cumsum(self.unit_sizes[chunk.sources])])
            self._starts[(epoch, number)] = found
            if len(self._starts) > 4:
                self._starts.popitem(last=False)
        return found

    def chunk_of(self, epoch: int, position: int) -> int:
        """The chunk whose units hold ``position``."""
        if self.uniform:
            return position // (self.blocks.chunk * self.unit)
        low, high = 0, -(-self.units // self.blocks.chunk) - 1
        while low < high:  # the last chunk starting at or before the position
            middle = (low + high + 1) // 2
            if self.unit_start(epoch, middle * self.blocks.chunk) <= position:
                low = middle
            else:
                high = middle - 1
        return low

    def units_of(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The unit holding each of ``positions``, and the position's offset in it."""
        if self.uniform:
            units, offsets = np.divmod(positions, self.unit)
            return units, offsets
        units, offsets = np.empty_like(positions), np.empty_like(positions)
        low, high = self.chunk_of(epoch, int(positions.min())), self.chunk_of(epoch, int(positions.max()))
        if low == high:  # a batch of neighbours: one chunk, found by two searches
            numbers = np.full(len(positions), low, dtype=np.int64)
        else:
            numbers = np.asarray([self.chunk_of(epoch, int(p)) for p in positions.tolist()], dtype=np.int64)
        for number in np.unique(numbers).tolist():
            here = numbers == number
            starts = self.chunk_starts(epoch, number)
            within = np.searchsorted(starts, positions[here], side="right") - 1
            units[here] = number * self.blocks.chunk + within
            offsets[here] = positions[here] - starts[within]
        return units, offsets

    # -- sources and draws --------------------------------------------------------------------------

    def locate(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``positions`` of ``epoch``: the source it reads, and how many draws of that
        source the epoch made before it (a batch of neighbours touches a chunk or two)."""
        units, offsets = self.units_of(epoch, positions)
        numbers = units // self.blocks.chunk
        sources, draws = np.empty_like(units), np.empty_like(units)
        for number in np.unique(numbers).tolist():
            chunk = self.chunk(epoch, number)
            here = numbers == number
            at = units[here] - chunk.start
            sources[here] = chunk.sources[at]
            draws[here] = chunk.draws[at] * self.unit_sizes[sources[here]] + offsets[here]
        return sources, draws

    def drawn(self, epoch: int, position: int) -> np.ndarray:
        """Samples each source gives in the first ``position`` positions of ``epoch``."""
        unit, offset = self._unit_at(epoch, position)
        start = self.start(epoch)
        at = self.counts.at(np.asarray([start, start + unit]))
        drawn: np.ndarray = (at[1] - at[0]) * self.unit_sizes
        if offset:
            drawn[self.chunk(epoch, unit // self.blocks.chunk).sources[unit % self.blocks.chunk]] += offset
        return drawn

    def target(self, epoch: int, position: int) -> np.ndarray:
        """What the weights ask of each source over the first ``position`` positions of ``epoch``."""
        unit, offset = self._unit_at(epoch, position)
        start = self.start(epoch)
        whole = self.segments.expected(start + unit) - self.segments.expected(start)
        return whole * self.unit_sizes + offset * self.segments.at(start + unit)  # type: ignore[no-any-return]

    def before(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Each source's draws and target over the epochs before ``epoch``."""
        if not self.scheduled:  # every epoch alike
            return epoch * self.drawn(0, self.length), epoch * self.target(0, self.length)
        start = self.start(epoch)
        if self.length % self.unit == 0:  # the epochs join up on the timeline
            return self.counts.at(start) * self.unit, self.segments.expected(start) * self.unit
        earlier = range(epoch)
        drawn = sum((self.drawn(e, self.length) for e in earlier), np.zeros(self.counts.sources, np.int64))
        target = sum((self.target(e, self.length) for e in earlier), np.zeros(self.counts.sources))
        return drawn, target

    def _unit_at(self, epoch: int, position: int) -> tuple[int, int]:
        """The unit ``position`` falls in and its offset there (the epoch's end: past its last unit)."""
        if self.uniform:
            unit, offset = divmod(position, self.unit)
            return unit, offset
        if position >= self.length:
            return self.units, 0
        units, offsets = self.units_of(epoch, np.asarray([position], dtype=np.int64))
        return int(units[0]), int(offsets[0])
