"""``MixtureDataset``: several map-style datasets read as one, in shares that follow weights."""

from __future__ import annotations

import itertools
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset, get_worker_info

from loaderfactory.components.epoch_announce import EpochTag, reading_as, reading_tag
from loaderfactory.components.order_forwarding import order_of
from loaderfactory.mixture.epochs import Stop, passes
from loaderfactory.mixture.schedule import Interpolate
from loaderfactory.mixture.timeline import Timeline

PASS_STRIDE = 2**20
"""Pass numbers of one epoch's passes over a source start at ``epoch * PASS_STRIDE``."""


class MixtureDataset(Dataset[Any]):
    """Items of ``sources`` mixed by weight: index ``k`` is the ``k``-th position of the epoch.

    Which source a position reads and which of its samples depend only on ``(seed, epoch, k)`` and the
    config (:mod:`loaderfactory.mixture`), so every rank and worker agrees, and a loader resumes a
    mixture at any position, world size or worker count, exactly. Read it unshuffled, or shuffled: its
    :meth:`epoch_order` keeps the positions in order (the mixing is the shuffle). A source is read in
    a new order on every pass (its own ``epoch_order`` where it has one, as ``shards`` do).

    Args:
        sources: name → map-style dataset.
        weights: ``(at, {name: weight})`` points along the timeline (positions counted over epochs,
            ``at`` of the first is 0); one point: fixed weights. Weights are normalised.
        stop: ``first_exhausted``, ``all_exhausted`` or a number of samples per epoch.
        interpolate: ``hold`` each point's weights until the next, or change them ``linear``-ly.
        block: positions whose shares are exact, in a random order (the global batch: every batch).
        seed: the mixing's and the sources' orders' seed.
        shuffle: read each source in a new order each pass; ``False``: in its own order.
        max_repeats: passes over a source an epoch may take; more is refused at once.
        source_key: add the source's name to each (dict) item under this key.
        unit: positions taken from one source at a time: the global batch makes every batch come
            from one source (``per_source`` batching), shares then counting batches.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Sequence[tuple[int, Mapping[str, float]]],
        stop: Stop = "all_exhausted",
        *,
        interpolate: Interpolate = "hold",
        block: int = 1024,
        seed: int = 0,
        shuffle: bool = True,
        max_repeats: int | None = None,
        source_key: str | None = None,
        unit: int = 1,
    ) -> None:
        self.names = list(sources)
        self.sources = [sources[name] for name in self.names]
        self.sizes = [len(source) for source in self.sources]
        self._sizes = np.asarray(self.sizes, dtype=np.int64)
        points = [(int(at), [float(w.get(name, 0.0)) for name in self.names]) for at, w in weights]
        self.timeline = Timeline(points, interpolate, stop, self.sizes, block, seed, unit)
        self.length = self.timeline.length
        self.seed = seed
        self.shuffle = shuffle
        self.source_key = source_key
        self._source_seeds = [_source_seed(seed, name) for name in self.names]
        self._orders: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.epoch = 0
        self._check_repeats(max_repeats)

    def __len__(self) -> int:
        return self.length

    # -- epochs -------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next (an unshuffled loader calls it each epoch)."""
        self.epoch = epoch

    def epoch_order(self, seed: int, epoch: int) -> range:
        """The positions in order, whatever the loader's seed: the mixture's own seed mixes them."""
        self.epoch = epoch
        return range(self.length)

    def draws(self, epoch: int) -> np.ndarray:
        """Samples each source gives in ``epoch``."""
        return self.timeline.drawn(epoch, self.length)

    def shares(self, epoch: int, position: int) -> dict[str, dict[str, float]]:
        """Per source, over the first ``position`` positions of ``epoch``: ``drawn`` (samples read) and
        ``target`` (what the weights ask, not rounded), and the same ``since_start`` of the run."""
        position = min(max(position, 0), self.length)
        drawn, target = self.timeline.drawn(epoch, position), self.timeline.target(epoch, position)
        earlier = range(epoch) if self.timeline.scheduled else [0] * epoch  # fixed: every epoch alike
        drawn_all = drawn + sum((self.timeline.drawn(e, self.length) for e in earlier), np.zeros_like(drawn))
        target_all = target + sum(
            (self.timeline.target(e, self.length) for e in earlier), np.zeros_like(target)
        )
        return {
            name: {
                "drawn": int(drawn[s]),
                "target": float(target[s]),
                "drawn_since_start": int(drawn_all[s]),
                "target_since_start": float(target_all[s]),
            }
            for s, name in enumerate(self.names)
        }

    def telemetry(self) -> dict[str, Any]:
        """What an epoch reads of each source: samples, passes and share, and the epoch's length."""
        drawn = self.draws(self.epoch)
        return {
            "epoch_length": self.length,
            "sources": {
                name: {
                    "samples": int(drawn[s]),
                    "passes": passes(drawn, self.sizes)[s],
                    "size": self.sizes[s],
                }
                for s, name in enumerate(self.names)
            },
        }

    def _current_epoch(self) -> int:
        tag = reading_tag(in_worker=get_worker_info() is not None)
        return self.epoch if tag is None else tag.epoch

    # -- reading ------------------------------------------------------------------------------------

    def locate(self, position: int, epoch: int | None = None) -> tuple[int, int]:
        """``(source, sample index in it)`` that ``position`` of ``epoch`` (the current one) reads."""
        sources, _, indices = self.place([position], epoch)
        return int(sources[0]), int(indices[0])

    def place(
        self, positions: Sequence[int] | np.ndarray, epoch: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each of ``positions`` of ``epoch`` (the current one): its source, the pass number the
        source is read in (its epoch, as the mixture tells it: ``epoch * PASS_STRIDE + pass``) and
        the sample index, as arrays."""
        at = self._checked(positions)
        sources, numbers, indices = (np.empty_like(at) for _ in range(3))
        for source, number, slots, taken in self._groups(at, epoch):
            sources[slots], numbers[slots], indices[slots] = source, number, taken
        return sources, numbers, indices

    def __getitem__(self, position: int) -> Any:
        return self.__getitems__([position])[0]

    def __getitems__(self, positions: Sequence[int]) -> list[Any]:
        """The items at ``positions``: each source's read at once per pass (its ``__getitems__`` where
        it has one), told that pass as its epoch, in this process or a worker alike."""
        at = self._checked(positions)
        order: list[int] = []
        read: list[Any] = []
        for source, number, slots, taken in self._groups(at, None):
            indices = taken.tolist()
            with reading_as(EpochTag(self._source_seeds[source], number, self.shuffle)):
                got = self._read_many(source, indices, int(at[slots[0]]))
            read += got if self.source_key is None else self._labelled(source, indices, got)
            order += slots.tolist()
        items: list[Any] = [None] * len(read)
        for slot, item in zip(order, read, strict=True):
            items[slot] = item
        return items

    def _checked(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        at = np.asarray(positions, dtype=np.int64).reshape(-1)
        outside = (at < 0) | (at >= self.length)
        if outside.any():
            position = int(at[int(np.argmax(outside))])
            raise IndexError(f"mixture position {position} out of range [0, {self.length})")
        return at

    def _groups(self, at: np.ndarray, epoch: int | None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(source, pass number, slots, sample indices)`` for each source pass the positions ``at``
        read: which of them read it, and what."""
        epoch = self._current_epoch() if epoch is None else epoch
        sources, draws = self.timeline.locate(epoch, at)
        passes, within = np.divmod(draws, self._sizes[sources])
        grouped = np.lexsort((passes, sources))
        keys = sources[grouped] * PASS_STRIDE + passes[grouped]
        cuts = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(grouped)]
        for first, end in itertools.pairwise(cuts):
            slots = grouped[first:end]
            source, taken = divmod(int(keys[first]), PASS_STRIDE)
            number = epoch * PASS_STRIDE + taken
            yield source, number, slots, self._order(source, number)[within[slots]]

    def _read_many(self, source: int, indices: list[int], first_position: int) -> list[Any]:
        dataset = self.sources[source]
        getitems = getattr(dataset, "__getitems__", None)
        try:
            return list(getitems(indices)) if callable(getitems) else [dataset[i] for i in indices]
        except Exception as error:
            error.add_note(self._where(source, indices, first_position))
            raise

    def _where(self, source: int, indices: list[int], first_position: int) -> str:
        samples = ", ".join(map(str, indices[:8])) + (", ..." if len(indices) > 8 else "")
        return (
            f"while reading mixture source {self.names[source]!r}, sample(s) {samples} "
            f"(mixture position(s) {first_position}{'...' if len(indices) > 1 else ''})"
        )

    def _labelled(self, source: int, indices: list[int], items: list[Any]) -> list[Any]:
        """``items`` with the source's name under :attr:`source_key`."""
        name, key = self.names[source], self.source_key
        for index, item in zip(indices, items, strict=True):
            if not isinstance(item, dict):
                raise TypeError(
                    f"mixture source {name!r} gave a {type(item).__name__} at sample {index}: "
                    f"source_key ({key!r}) labels dict items only; set source_key: null"
                )
        return [{**item, key: name} for item in items]

    def _order(self, source: int, pass_number: int) -> np.ndarray:
        """Source ``source``'s order in pass ``pass_number`` (cached, the last few)."""
        key = (source, pass_number)
        order = self._orders.get(key)
        if order is None:
            order = self._make_order(source, pass_number)
            self._orders[key] = order
            if len(self._orders) > 2 * len(self.sources):
                self._orders.popitem(last=False)
        return order

    def _make_order(self, source: int, pass_number: int) -> np.ndarray:
        size, seed = self.sizes[source], self._source_seeds[source]
        if not self.shuffle:
            return np.arange(size, dtype=np.int64)
        own = order_of(self.sources[source])
        if own is not None:
            return np.asarray(own(seed, pass_number), dtype=np.int64)
        return np.random.default_rng([seed, pass_number]).permutation(size)

    # -- checks -------------------------------------------------------------------------------------

    def _check_repeats(self, max_repeats: int | None) -> None:
        if max_repeats is None:
            return
        # Any epoch of a schedule takes no more than its largest weight does.
        timeline = self.timeline
        scheduled = timeline.segments.weights.max(axis=0) * (timeline.units + 1) * timeline.unit
        most = scheduled if timeline.scheduled else self.draws(0)
        for name, taken, size in zip(
            self.names, passes(np.asarray(most), self.sizes), self.sizes, strict=True
        ):
            if taken > max_repeats:
                raise ValueError(
                    f"source {name!r} ({size} samples) would be read {taken} times an epoch, more than "
                    f"max_repeats={max_repeats}: lower its weight, shorten the epoch (stop) or "
                    "raise max_repeats"
                )


def _source_seed(seed: int, name: str) -> int:
    """A seed of the source's own: two sources never share an order, even given the same dataset."""
    return int(np.random.SeedSequence([seed % 2**64, zlib.crc32(name.encode())]).generate_state(1)[0])
