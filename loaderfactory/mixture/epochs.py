"""How long a mixture's epoch is, by its ``stop`` rule, and how often it reads each source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from loaderfactory.mixture.counts import Counts


class Steps(NamedTuple):
    """An epoch of this many units (global steps, with ``per_source`` batching)."""

    steps: int


Stop = Literal["first_exhausted", "all_exhausted"] | int | Steps
"""End an epoch when one source has been read whole, when every source has, after that many samples,
or after that many :class:`Steps`."""


def exhausted_at(counts: Counts, source: int, size: int) -> int:
    """The first position count ``K`` at which ``source`` has had ``size`` draws (from the timeline's
    start, with fixed weights)."""
    low, high = 0, 1
    while counts.at(high)[source] < size:
        low, high = high, high * 2
    while low < high:  # counts never decrease: the first K with enough draws
        middle = (low + high) // 2
        if counts.at(middle)[source] >= size:
            high = middle
        else:
            low = middle + 1
    return low


def epoch_length(counts: Counts, sizes: Sequence[int], weights: np.ndarray, stop: Stop) -> int:
    """Positions in an epoch: ``stop`` samples, or up to the position where the first (or the last) of
    the sources with a weight has been read whole."""
    if isinstance(stop, int):
        return stop
    ends = [exhausted_at(counts, s, size) for s, size in enumerate(sizes) if weights[s] > 0]
    return min(ends) if stop == "first_exhausted" else max(ends)


def passes(draws: np.ndarray, sizes: Sequence[int]) -> list[int]:
    """How many passes over each source ``draws`` draws take (a pass begun counts)."""
    return [-(-int(d) // size) for d, size in zip(draws, sizes, strict=True)]
