"""The shards kind's shuffled order: shards permuted per epoch, samples mixed within a window of shards.

A uniform permutation over all samples would touch a different shard at nearly every step; this
order keeps a rank on ``window`` shards at a time while still mixing samples across shards. It is a
pure function of ``(counts, seed, epoch, window)``: the same at any world size and worker count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def window_order(counts: Sequence[int], seed: int, epoch: int, window: int) -> np.ndarray:
    """Global sample indices of one epoch over shards holding ``counts[k]`` samples each.

    The shards are permuted by ``(seed, epoch)``, cut into consecutive windows of ``window`` shards,
    and each window's samples are permuted among themselves; window ``w``'s samples all come before
    window ``w + 1``'s. ``window=1`` mixes samples within each shard only.

    Raises:
        ValueError: ``window`` < 1 or a negative count.
    """
    if window < 1:
        raise ValueError(f"window must be ≥ 1, got {window}")
    if any(count < 0 for count in counts):
        raise ValueError(f"sample counts must be ≥ 0, got {list(counts)}")
    rng = np.random.default_rng([seed % 2**64, epoch])
    starts = np.fromiter(itertools.accumulate(counts, initial=0), dtype=np.int64)
    shards = rng.permutation(len(counts))
    parts = []
    for first in range(0, len(shards), window):
        members = shards[first : first + window]
        samples = np.concatenate([np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in members])
        parts.append(rng.permutation(samples))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
