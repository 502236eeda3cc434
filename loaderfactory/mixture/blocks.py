"""Which source each position of an epoch reads: blocks of exact counts, arranged at random.

An epoch's positions are cut into blocks of ``block`` positions from its start. Block ``j`` holds
each source's count between the block's ends (:class:`~loaderfactory.mixture.counts.Counts`), in an
order drawn from ``(seed, epoch, j)``. So every block holds the shares exactly (to one draw), each
position's source is random within it, and a position's block is found without looking at the
blocks before it. With ``block`` set to the global batch, every global batch holds the shares.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from loaderfactory.mixture.counts import Counts

ARRANGE_SALT = 0x6D6978
"""Keeps the block arrangements' random streams apart from every other use of the seed."""


@dataclass(frozen=True)
class Block:
    """Positions ``[start, start + len(sources))`` of an epoch: each one's source and draw number
    (how many draws of that source in the epoch came before it)."""

    start: int
    sources: np.ndarray
    draws: np.ndarray


class Blocks:
    """The blocks of every epoch, the last few kept.

    Args:
        counts: the sources' cumulative counts along the timeline.
        block: positions per block.
        seed: the arrangements' seed.
    """

    def __init__(self, counts: Counts, block: int, seed: int, keep: int = 4) -> None:
        self.counts = counts
        self.block = block
        self.seed = seed
        self._keep = keep
        self._kept: OrderedDict[tuple[int, int, int], Block] = OrderedDict()

    def find(self, epoch: int, timeline_start: int, length: int, position: int) -> Block:
        """The block holding ``position`` of ``epoch``, an epoch of ``length`` positions that starts at
        ``timeline_start`` on the timeline."""
        index = position // self.block
        key = (epoch, timeline_start, index)
        found = self._kept.get(key)
        if found is None:
            found = self._arrange(epoch, timeline_start, length, index)
            self._kept[key] = found
            if len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        return found

    def _arrange(self, epoch: int, timeline_start: int, length: int, index: int) -> Block:
        start = index * self.block
        end = min(start + self.block, length)
        at = self.counts.at(np.asarray([timeline_start, timeline_start + start, timeline_start + end]))
        before, taken = at[1] - at[0], at[2] - at[1]
        sources = np.repeat(np.arange(self.counts.sources, dtype=np.int64), taken)
        rng = np.random.default_rng([self.seed % 2**64, ARRANGE_SALT, epoch, index])
        sources = sources[rng.permutation(sources.size)]
        draws = np.empty(sources.size, dtype=np.int64)
        grouped = np.argsort(sources, kind="stable")
        firsts = np.repeat(np.cumsum(taken) - taken, taken)
        draws[grouped] = np.arange(sources.size) - firsts + np.repeat(before, taken)
        return Block(start, sources, draws)
