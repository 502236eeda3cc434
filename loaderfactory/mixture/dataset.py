"""``MixtureDataset``: several map-style datasets read as one, in shares that follow weights."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset, get_worker_info

from loaderfactory.components.epoch_announce import EpochTag, reading_as, reading_tag
from loaderfactory.errors import ResumeError
from loaderfactory.mixture.epochs import Stop, passes
from loaderfactory.mixture.orders import SourceOrders
from loaderfactory.mixture.placing import PASS_STRIDE, Group, Placed, Placer
from loaderfactory.mixture.schedule import Interpolate
from loaderfactory.mixture.steps import GlobalSteps
from loaderfactory.mixture.timeline import Timeline

PLACEMENT = 2
"""How positions are placed (the blocks' arrangement); a state saved under another placement would go
on with other draws than the rest of its epoch. 1: one generator per block (saved without the key)."""


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
        unit_sizes: name → positions per unit of that source, where a source's batches have their own
            size (fixed weights; the epoch's length in steps or by exhaustion).
        global_batch: the global batch the mixing assumes (``stratified``, ``per_source``): a loader
            checks its batches are cut so.
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
        unit_sizes: Mapping[str, int] | None = None,
        global_batch: int | None = None,
    ) -> None:
        self.names = list(sources)
        self.sources = [sources[name] for name in self.names]
        self.sizes = [len(source) for source in self.sources]
        points = [(int(at), [float(w.get(name, 0.0)) for name in self.names]) for at, w in weights]
        per_source = None if unit_sizes is None else [unit_sizes.get(name, unit) for name in self.names]
        self.timeline = Timeline(points, interpolate, stop, self.sizes, block, seed, unit, per_source)
        self.global_batch = global_batch
        self.length = self.timeline.length
        self.seed = seed
        self.shuffle = shuffle
        self.source_key = source_key
        self.orders = SourceOrders(self.sources, self.names, seed, shuffle)
        self.placer = Placer(self.timeline, self.orders)
        self._readers = [_reader(source) for source in self.sources]
        self.epoch = 0
        self._check_repeats(max_repeats)

    def __len__(self) -> int:
        return self.length

    # -- state: what a loader's position counts in ----------------------------------------------------

    fixed = True
    """The state never changes while reading: a loader takes no snapshot of it per batch."""

    def state_dict(self) -> dict[str, Any]:
        """The epoch's length and how positions are placed: a loader's position means the same
        draws only where both are this mixture's."""
        return {"length": self.length, "placement": PLACEMENT}

    def state_snapshot(self) -> None:
        return None

    def state_from_snapshot(self, snapshot: None) -> dict[str, Any]:
        return self.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Refuse a state saved for another length, or under another placement of the positions."""
        placement = state.get("placement", 1)
        if placement != PLACEMENT:
            raise ResumeError(
                f"the state was saved by a loaderfactory that placed the mixture's positions another way "
                f"(placement {placement}, this one {PLACEMENT}): the rest of its epoch would not be the "
                "rest of the saved one. Resume with the version that saved it, or start the run's data afresh"
            )
        if state.get("length") != self.length:
            raise ResumeError(
                f"the state was saved for a mixture epoch of {state.get('length')} positions, this one has "
                f"{self.length}; resume with the same sources, weights and stop"
            )

    # -- epochs -------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next (an unshuffled loader calls it each epoch)."""
        self.epoch = epoch

    def epoch_order(self, seed: int, epoch: int) -> range:
        """The positions in order, whatever the loader's seed: the mixture's own seed mixes them."""
        self.epoch = epoch
        return range(self.length)

    def global_steps(self, epoch: int) -> GlobalSteps | None:
        """Epoch ``epoch``'s global steps where batches differ in size by source, else None (the
        loader cuts batches of its own size)."""
        return None if self.timeline.uniform else GlobalSteps(self.timeline, epoch)

    def step_sizes(self) -> dict[str, int]:
        """Samples in a global step of each source (its unit)."""
        return dict(zip(self.names, self.timeline.unit_sizes.tolist(), strict=True))

    def draws(self, epoch: int) -> np.ndarray:
        """Samples each source gives in ``epoch``."""
        return self.timeline.drawn(epoch, self.length)

    def shares(self, epoch: int, position: int) -> dict[str, dict[str, float]]:
        """Per source, over the first ``position`` positions of ``epoch``: ``drawn`` (samples read) and
        ``target`` (what the weights ask, not rounded), and the same ``since_start`` of the run."""
        position = min(max(position, 0), self.length)
        drawn, target = self.timeline.drawn(epoch, position), self.timeline.target(epoch, position)
        drawn_before, target_before = self.timeline.before(epoch)
        drawn_all, target_all = drawn + drawn_before, target + target_before
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
        epoch = self._current_epoch() if epoch is None else epoch
        keys, indices = self.placer.place(epoch, self._checked(positions))
        sources, passes = np.divmod(keys, PASS_STRIDE)
        return sources, epoch * PASS_STRIDE + passes, indices

    def __getitem__(self, position: int) -> Any:
        return self.__getitems__([position])[0]

    def __getitems__(self, positions: Sequence[int]) -> list[Any]:
        """The items at ``positions``: each source's read at once per pass (its ``__getitems__`` where
        it has one), told that pass as its epoch, in this process or a worker alike."""
        epoch = self._current_epoch()
        groups, back = self._placed(positions, epoch)
        if back is None:  # one group, in order
            return self._read_group(epoch, groups[0], positions) if groups else []
        read: list[Any] = []
        for group in groups:
            read += self._read_group(epoch, group, positions)
        return _taken(read, back)

    def _placed(self, positions: Sequence[int], epoch: int) -> Placed:
        """The groups of ``positions``; a batch of every ``step``-th position (a range, or a batch
        the sampler marks so) is cut from its span, worked out once."""
        count = len(positions)
        if not count:
            return Placed([], None)
        first = int(positions[0])
        step = getattr(positions, "step", None)
        if step is None and isinstance(positions, list) and positions == list(range(first, first + count)):
            step = 1
        if step and step > 0 and first >= 0 and first + (count - 1) * step < self.length:
            found = self.placer.run(epoch, first, count, step)
            if found is not None:
                return found
        return self.placer.groups(epoch, self._checked(positions))

    def _read_group(self, epoch: int, group: Group, positions: Sequence[int]) -> list[Any]:
        key, first, indices = group
        source, pass_in_epoch = divmod(key, PASS_STRIDE)
        tag = EpochTag(self.orders.seeds[source], epoch * PASS_STRIDE + pass_in_epoch, self.shuffle)
        with reading_as(tag):
            got = self._read_many(source, indices, int(positions[first]))
        return got if self.source_key is None else self._labelled(source, indices, got)

    def _checked(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        at = np.asarray(positions, dtype=np.int64).reshape(-1)
        outside = (at < 0) | (at >= self.length)
        if outside.any():
            position = int(at[int(np.argmax(outside))])
            raise IndexError(f"mixture position {position} out of range [0, {self.length})")
        return at

    def _read_many(self, source: int, indices: list[int], first_position: int) -> list[Any]:
        try:
            got = self._readers[source](indices)
        except Exception as error:
            error.add_note(self._where(source, indices, first_position))
            raise
        if len(got) != len(indices):
            raise RuntimeError(
                f"{type(self.sources[source]).__name__}.__getitems__ gave {len(got)} items for "
                f"{len(indices)} indices; {self._where(source, indices, first_position)}"
            )
        return got

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

    # -- checks -------------------------------------------------------------------------------------

    def _check_repeats(self, max_repeats: int | None) -> None:
        if max_repeats is None:
            return
        # Any epoch of a schedule takes no more than its largest weight does.
        timeline = self.timeline
        scheduled = timeline.segments.weights.max(axis=0) * (timeline.units + 1) * timeline.unit_sizes
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


def _reader(dataset: Any) -> Callable[[list[int]], list[Any]]:
    """Reads a list of indices of ``dataset``: its ``__getitems__`` where it has one."""
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return functools.partial(_listed, getitems)
    return functools.partial(_taken, dataset)


def _listed(getitems: Callable[[list[int]], Any], indices: list[int]) -> list[Any]:
    return list(getitems(indices))


def _taken(items: Any, indices: list[int]) -> list[Any]:
    """``[items[i] for i in indices]``, indexed in C."""
    if len(indices) == 1:
        return [items[indices[0]]]
    return list(operator.itemgetter(*indices)(items)) if indices else []
