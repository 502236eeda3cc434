"""A mixture's arithmetic: how long an epoch is, and which source and draw each position holds.

Positions are taken in units: one position each (``random`` and ``stratified`` batching), or one
global batch each (``per_source``: every batch from one source). The schedule counts units along a
timeline that runs on over epochs when the weights change with time, and starts again each epoch
when they are fixed (every epoch then holds the same counts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loaderfactory.mixture.blocks import CHUNK_POSITIONS, Blocks, Chunk
from loaderfactory.mixture.counts import Counts
from loaderfactory.mixture.epochs import Stop, epoch_length
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
        unit: positions per unit (a global batch for ``per_source`` batching, else 1).
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
    ) -> None:
        self.unit = unit
        self.segments = segments([(at // unit, weights) for at, weights in points], interpolate)
        self.scheduled = len(self.segments.starts) > 1
        self.counts = Counts(self.segments)
        if isinstance(stop, int):
            self.length = stop
        else:
            in_units = [-(-size // unit) for size in sizes]
            self.length = epoch_length(self.counts, in_units, self.segments.weights[0], stop) * unit
        self.units = -(-self.length // unit)
        self.blocks = Blocks(self.counts, block, seed, per_chunk=max(1, CHUNK_POSITIONS // (block * unit)))

    def start(self, epoch: int) -> int:
        """The unit ``epoch`` starts at on the timeline (0 for fixed weights: every epoch alike)."""
        return epoch * self.units if self.scheduled else 0

    def chunk(self, epoch: int, number: int) -> Chunk:
        """Chunk ``number`` of ``epoch``'s units (:class:`~loaderfactory.mixture.blocks.Chunk`)."""
        return self.blocks.find(epoch, self.start(epoch), self.units, number * self.blocks.chunk)

    def locate(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``positions`` of ``epoch``: the source it reads, and how many draws of that
        source the epoch made before it (a batch of neighbours touches a chunk or two)."""
        units, offsets = np.divmod(positions, self.unit)
        numbers = units // self.blocks.chunk
        low, high = int(numbers.min()), int(numbers.max())
        if low == high:  # one chunk: what a span or a batch of neighbours mostly is
            chunk = self.chunk(epoch, low)
            at = units - chunk.start
            return chunk.sources[at], chunk.draws[at] * self.unit + offsets
        sources, draws = np.empty_like(units), np.empty_like(units)
        for number in np.unique(numbers).tolist():
            chunk = self.chunk(epoch, number)
            here = numbers == number
            at = units[here] - chunk.start
            sources[here] = chunk.sources[at]
            draws[here] = chunk.draws[at] * self.unit + offsets[here]
        return sources, draws

    def drawn(self, epoch: int, position: int) -> np.ndarray:
        """Samples each source gives in the first ``position`` positions of ``epoch``."""
        unit, offset = divmod(position, self.unit)
        start = self.start(epoch)
        at = self.counts.at(np.asarray([start, start + unit]))
        drawn: np.ndarray = (at[1] - at[0]) * self.unit
        if offset:
            drawn[self.locate(epoch, np.asarray([unit * self.unit]))[0][0]] += offset
        return drawn

    def target(self, epoch: int, position: int) -> np.ndarray:
        """What the weights ask of each source over the first ``position`` positions of ``epoch``."""
        unit, offset = divmod(position, self.unit)
        start = self.start(epoch)
        whole = self.segments.expected(start + unit) - self.segments.expected(start)
        return whole * self.unit + offset * self.segments.at(start + unit)  # type: ignore[no-any-return]

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
