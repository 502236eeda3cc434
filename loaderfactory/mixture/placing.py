"""Where each position of an epoch reads: its source, the pass over that source, and the sample.

A position's *key* is ``source * PASS_STRIDE + pass``, its pass counted within the epoch; the pass
number a source is told is ``epoch * PASS_STRIDE + pass``. A batch of consecutive positions (what an
unshuffled loader asks) is cut from a span worked out once, every position of it at a time.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np

from loaderfactory.mixture.orders import SourceOrders
from loaderfactory.mixture.timeline import Timeline

PASS_STRIDE = 2**20
"""Pass numbers of one epoch's passes over a source start at ``epoch * PASS_STRIDE``."""


class Placer:
    """Keys and sample indices of positions, and of whole spans of them (the last few kept)."""

    def __init__(self, timeline: Timeline, orders: SourceOrders, keep: int = 4) -> None:
        self.timeline = timeline
        self.orders = orders
        self.span = timeline.blocks.block * timeline.unit
        self._sizes = np.asarray(orders.sizes, dtype=np.int64)
        self._keep = keep
        self._spans: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def place(self, epoch: int, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, sample indices)`` of positions ``at`` (inside the epoch) of ``epoch``."""
        sources, draws = self.timeline.locate(epoch, at)
        passes, within = np.divmod(draws, self._sizes[sources])
        keys = sources * PASS_STRIDE + passes
        grouped = np.argsort(keys, kind="stable")
        ordered = keys[grouped]
        cuts = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), len(keys)]
        indices = np.empty_like(draws)
        for first, end in itertools.pairwise(cuts):  # a source's pass: one order for all its draws
            source, taken = divmod(int(ordered[first]), PASS_STRIDE)
            here = grouped[first:end]
            indices[here] = self.orders.order(source, epoch * PASS_STRIDE + taken)[within[here]]
        return keys, indices

    def run(self, epoch: int, first: int, count: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`place` of positions ``first, first + 1, ...`` (``count`` of them), cut from their
        span; None when they cross into the next span."""
        number = first // self.span
        if (first + count - 1) // self.span != number:
            return None
        key = (epoch, number)
        found = self._spans.get(key)
        if found is None:
            start = number * self.span
            end = min(start + self.span, self.timeline.length)
            found = self._spans[key] = self.place(epoch, np.arange(start, end, dtype=np.int64))
            if len(self._spans) > self._keep:
                self._spans.popitem(last=False)
        offset = first - number * self.span
        return found[0][offset : offset + count], found[1][offset : offset + count]
