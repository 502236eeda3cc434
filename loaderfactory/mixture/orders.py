"""The order each source is read in on each pass: its own order where it has one, else a seeded
permutation; a seed of its own per source name, so two sources never share an order."""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from loaderfactory.components.order_forwarding import order_of


class SourceOrders:
    """Each source's order per pass number, the last few kept.

    Args:
        sources: the datasets, in the mixture's order.
        names: their names (each seeds its source's orders).
        seed: the mixture's seed.
        shuffle: ``False``: every pass reads a source in its own index order.
    """

    def __init__(self, sources: Sequence[Any], names: Sequence[str], seed: int, shuffle: bool) -> None:
        self.sources = list(sources)
        self.sizes = [len(source) for source in self.sources]
        self.seeds = [_source_seed(seed, name) for name in names]
        self.shuffle = shuffle
        self._kept: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def order(self, source: int, pass_number: int) -> np.ndarray:
        """Source ``source``'s order in pass ``pass_number``."""
        key = (source, pass_number)
        order = self._kept.get(key)
        if order is None:
            order = self._kept[key] = self._make(source, pass_number)
            if len(self._kept) > 2 * len(self.sources):
                self._kept.popitem(last=False)
        return order

    def _make(self, source: int, pass_number: int) -> np.ndarray:
        size, seed = self.sizes[source], self.seeds[source]
        if not self.shuffle:
            return np.arange(size, dtype=np.int64)
        own = order_of(self.sources[source])
        if own is not None:
            return np.asarray(own(seed, pass_number), dtype=np.int64)
        return np.random.default_rng([seed, pass_number]).permutation(size)


def _source_seed(seed: int, name: str) -> int:
    """A seed of the source's own: two sources never share an order, even given the same dataset."""
    return int(np.random.SeedSequence([seed % 2**64, zlib.crc32(name.encode())]).generate_state(1)[0])
