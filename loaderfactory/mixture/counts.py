"""How many of the first ``K`` positions of a mixture each source takes: exact, monotone, closed form.

Sources split positions one after another: source 0 takes its share of all positions, source 1 its
share of the rest, and so on; the last takes what is left. At each split, the first ``m`` positions
that reach it give the source ``floor(A(m) + 1/2)`` of them, where ``A(m)`` is its expected count:
the ratio of its weight to the weights still splitting, summed over those ``m`` positions. ``A`` is
piecewise linear (the ratio is constant within a segment of the schedule) with slope at most 1, so
each source's count never decreases, grows by at most one a position, and stays within one half of
its expected share of what reached it; the counts always sum to ``K``. Any ``K`` costs
``O(sources × log segments)``: no draw before it is replayed.
"""

from __future__ import annotations

import numpy as np

from loaderfactory.mixture.schedule import Segments


class Counts:
    """The cumulative draw counts of each source, at any positions of the timeline.

    Args:
        segments: the weights along the timeline (:func:`~loaderfactory.mixture.schedule.segments`).
    """

    def __init__(self, segments: Segments) -> None:
        weights = segments.weights
        self.sources = weights.shape[1]
        rest = np.cumsum(weights[:, ::-1], axis=1)[:, ::-1]  # weight still splitting at each source
        with np.errstate(divide="ignore", invalid="ignore"):
            self._ratios = np.where(rest > 0, weights / np.where(rest > 0, rest, 1), 0.0)
        self._starts: list[np.ndarray] = []
        self._bases: list[np.ndarray] = []
        reached = segments.starts.astype(np.int64)  # positions reaching split 0 when each segment starts
        for split in range(self.sources - 1):
            ratio = self._ratios[:, split]
            base = np.concatenate([[0.0], np.cumsum(np.diff(reached) * ratio[:-1])])
            self._starts.append(reached)
            self._bases.append(base)
            reached = reached - np.floor(base + 0.5).astype(np.int64)

    def at(self, positions: np.ndarray | int) -> np.ndarray:
        """Draws of each source among the first ``K`` positions, for each ``K`` in ``positions``:
        shape ``(len(positions), sources)`` (``(sources,)`` for one ``K``)."""
        single = np.ndim(positions) == 0
        reaching = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        out = np.empty((reaching.size, self.sources), dtype=np.int64)
        for split in range(self.sources - 1):
            starts, bases = self._starts[split], self._bases[split]
            segment = np.searchsorted(starts, reaching, side="right") - 1
            taken = np.floor(
                bases[segment] + (reaching - starts[segment]) * self._ratios[segment, split] + 0.5
            ).astype(np.int64)
            out[:, split] = taken
            reaching = reaching - taken
        out[:, -1] = reaching
        return out[0] if single else out
