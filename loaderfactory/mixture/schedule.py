"""The weights of a mixture along its timeline, as segments of constant weights.

A schedule is a list of points ``(at, weights)``: each point's weights hold from its position on
(``hold``), or change linearly to the next point's (``linear``: cut into :data:`PIECES` steps of
constant weights per interval, each at its middle's weights). Before the first point its weights
hold; after the last, the last point's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Interpolate = Literal["hold", "linear"]
PIECES = 256
"""Steps of constant weights a linear change between two points is cut into (fewer if shorter)."""


@dataclass(frozen=True)
class Segments:
    """Weights that are constant on ``[starts[t], starts[t + 1])`` (the last segment never ends).

    ``weights[t]`` sums to 1; ``starts[0] == 0``.
    """

    starts: np.ndarray
    weights: np.ndarray

    def at(self, position: int) -> np.ndarray:
        """The weights in force at ``position``."""
        return self.weights[int(np.searchsorted(self.starts, position, side="right")) - 1]  # type: ignore[no-any-return]

    def expected(self, position: int) -> np.ndarray:
        """Draws each source should have had by ``position``: its weight summed over the positions before."""
        ends = np.minimum(np.append(self.starts[1:], np.iinfo(np.int64).max), position)
        lengths = np.maximum(ends - self.starts, 0).astype(np.float64)
        return lengths @ self.weights  # type: ignore[no-any-return]


def normalised(weights: Sequence[float]) -> np.ndarray:
    row = np.asarray(weights, dtype=np.float64)
    return row / row.sum()  # type: ignore[no-any-return]


def segments(points: Sequence[tuple[int, Sequence[float]]], interpolate: Interpolate = "hold") -> Segments:
    """The segments of a schedule of ``(at, weights)`` points, ordered by ``at`` (positions, ≥ 0)."""
    starts: list[int] = [0]
    rows: list[np.ndarray] = [normalised(points[0][1])]
    for (at, weights), (following, later) in zip(points, [*points[1:], (None, None)], strict=True):
        row = normalised(weights)
        if interpolate == "hold" or following is None or following == at:
            _add(starts, rows, at, row)
            continue
        end, last = int(following), normalised(later)  # type: ignore[arg-type]
        pieces = min(PIECES, end - at)
        cuts = [at + (end - at) * i // pieces for i in range(pieces + 1)]
        for left, right in itertools.pairwise(cuts):
            middle = ((left + right) / 2 - at) / (end - at)
            _add(starts, rows, left, normalised(row + (last - row) * middle))
    return Segments(np.asarray(starts, dtype=np.int64), np.stack(rows))


def _add(starts: list[int], rows: list[np.ndarray], at: int, row: np.ndarray) -> None:
    if at == starts[-1]:
        rows[-1] = row
    else:
        starts.append(at)
        rows.append(row)
