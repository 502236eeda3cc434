"""Which source each position of an epoch reads: blocks of exact counts, arranged at random.

An epoch's positions are cut into blocks of ``block`` positions from its start. Block ``j`` holds
each source's count between the block's ends (:class:`~loaderfactory.mixture.counts.Counts`), in an
order drawn from ``(seed, epoch)`` and the positions themselves (a counter-based hash, sorted within
the block). So every block holds the shares exactly (to one draw), each position's source is random
within it, and a position's block is found without looking at the blocks before it. With ``block``
set to the global batch, every global batch holds the shares. Blocks are arranged a chunk of them
at a time, every block of the chunk at once.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from loaderfactory.mixture.counts import Counts

ARRANGE_SALT = 0x6D6978
"""Keeps the block arrangements' random streams apart from every other use of the seed."""
CHUNK_POSITIONS = 8192
"""Blocks are arranged in chunks of about this many positions (one block at least)."""
_MASK = 2**64 - 1


@dataclass(frozen=True)
class Chunk:
    """Positions ``[start, start + len(sources))`` of an epoch: each one's source; the offsets into
    the chunk grouped by source, each source's in order; and per source, how many positions of the
    chunk it holds (``counted``) and how many draws of it the epoch made before (``before``). A
    source's positions, in order, take its draws ``before, before + 1, ...``."""

    start: int
    sources: np.ndarray
    grouped: np.ndarray
    counted: np.ndarray
    before: np.ndarray

    @functools.cached_property
    def draws(self) -> np.ndarray:
        """Each position's draw number: how many draws of its source the epoch made before it."""
        firsts = np.cumsum(self.counted) - self.counted
        draws = np.empty(len(self.sources), dtype=np.int64)
        draws[self.grouped] = np.arange(len(self.sources)) + np.repeat(self.before - firsts, self.counted)
        return draws


class Blocks:
    """The blocks of every epoch, a chunk of them at a time, the last few chunks kept.

    Args:
        counts: the sources' cumulative counts along the timeline.
        block: positions per block.
        seed: the arrangements' seed.
        per_chunk: blocks arranged together (default: about :data:`CHUNK_POSITIONS` positions).
    """

    def __init__(
        self, counts: Counts, block: int, seed: int, per_chunk: int | None = None, keep: int = 4
    ) -> None:
        self.counts = counts
        self.block = block
        self.seed = seed
        self.chunk = block * (per_chunk or max(1, CHUNK_POSITIONS // block))
        """Positions per chunk: whole blocks."""
        self._keep = keep
        self._kept: OrderedDict[tuple[int, int, int], Chunk] = OrderedDict()

    def find(self, epoch: int, timeline_start: int, length: int, position: int) -> Chunk:
        """The chunk holding ``position`` of ``epoch``, an epoch of ``length`` positions that starts
        at ``timeline_start`` on the timeline."""
        index = position // self.chunk
        key = (epoch, timeline_start, index)
        found = self._kept.get(key)
        if found is None:
            found = self._arrange(epoch, timeline_start, length, index)
            self._kept[key] = found
            if len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        return found

    def _arrange(self, epoch: int, timeline_start: int, length: int, index: int) -> Chunk:
        start = index * self.chunk
        end = min(start + self.chunk, length)
        ends = np.minimum(np.arange(start, end + self.block, self.block), end)  # block starts, end
        at = self.counts.at(np.concatenate([[timeline_start], timeline_start + ends]))
        taken = np.diff(at[1:], axis=0)  # per block and source
        keys = _hashed(_epoch_key(self.seed, epoch), np.arange(start, end, dtype=np.uint64))
        whole = int((ends[1:] - ends[:-1] == self.block).sum())
        parts = [(0, whole)] if whole else []
        if whole < len(taken):
            parts.append((whole, len(taken)))  # the epoch's last block, shorter
        offsets = ends - start
        sources = np.concatenate([_arranged(taken[a:b], keys[offsets[a] : offsets[b]]) for a, b in parts])
        grouped = np.argsort(sources, kind="stable")
        counted = taken.sum(axis=0)
        return Chunk(start, sources.astype(np.int64), grouped, counted, at[1] - at[0])


def _arranged(taken: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The sources of equal blocks that hold ``taken`` of each source (a row per block), each
    block's put in the order of its positions' ``keys``."""
    blocks, sources = taken.shape
    size = int(taken[0].sum())
    small = np.int16 if sources < 2**15 else np.int64  # 16 bits: the chunk's grouping is a radix sort
    grouped = np.repeat(np.tile(np.arange(sources, dtype=small), blocks), taken.ravel())
    order = np.argsort(keys.reshape(blocks, size), axis=1)
    return np.take_along_axis(grouped.reshape(blocks, size), order, axis=1).ravel()


def _epoch_key(seed: int, epoch: int) -> int:
    """One 64-bit key per ``(seed, epoch)`` of the arrangements."""
    return _mix(_mix(seed & _MASK ^ ARRANGE_SALT) ^ (epoch & _MASK))


def _mix(value: int) -> int:
    """splitmix64's finaliser on a Python int."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def _hashed(key: int, positions: np.ndarray) -> np.ndarray:
    """splitmix64 of ``key + position``, for each position (uint64, wrapping)."""
    value = positions * np.uint64(0x9E3779B97F4A7C15) + np.uint64(key)
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))
