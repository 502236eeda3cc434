"""The global steps of a mixture whose batches differ in size by source (``per_source`` batching with a
batch size per source): where each step starts in the epoch, for the loader's sampler."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from loaderfactory.mixture.timeline import Timeline


class GlobalSteps:
    """Epoch ``epoch``'s global steps: step ``j`` is the positions ``[start(j), start(j + 1))``, one
    batch of one source; the same on every rank and at any world size."""

    def __init__(self, timeline: Timeline, epoch: int) -> None:
        self.timeline = timeline
        self.epoch = epoch
        self.count = timeline.units
        """Steps in the epoch."""

    def start(self, step: int) -> int:
        """The position step ``step`` starts at (the epoch's length for ``count``)."""
        return self.timeline.unit_start(self.epoch, min(step, self.count))

    def step_at(self, position: int) -> int:
        """The step that starts at ``position``; a position inside a step is refused."""
        if position >= self.timeline.length:
            return self.count
        units, offsets = self.timeline.units_of(self.epoch, np.asarray([position], dtype=np.int64))
        if offsets[0]:
            raise ValueError(
                f"position {position} is inside global step {int(units[0])} of the mixture, not at its "
                "start: a state saved by a loader with other batch sizes cannot resume it"
            )
        return int(units[0])

    def bounds(self, first: int) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each step from ``first`` on."""
        timeline, per_chunk = self.timeline, self.timeline.blocks.chunk
        step = first
        while step < self.count:
            number = step // per_chunk
            starts = timeline.chunk_starts(self.epoch, number).tolist()
            for within in range(step - number * per_chunk, len(starts) - 1):
                yield starts[within], starts[within + 1]
            step = (number + 1) * per_chunk
