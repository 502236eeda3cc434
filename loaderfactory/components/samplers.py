"""The samplers of :class:`~loaderfactory.components.torch_loader.ResumableDataLoader`: each can
start a pass at any position, so a restored loader skips what was delivered without loading it.

:class:`ResumableSampler` takes this rank's part of the order engine's epoch order
(:mod:`loaderfactory.components.order`); :class:`ReplayedSampler` replays a sampler of yours.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import torch
from torch.utils.data import Sampler

from loaderfactory.components.epoch_announce import EpochTag, TaggedBatch, TaggedIndex
from loaderfactory.components.order import RankOrder, advance, batch_count, iter_batches, rank_part
from loaderfactory.errors import ArgumentError

_GOLDEN = 0x9E3779B97F4A7C15


class GlobalSteps(Protocol):
    """A dataset's own global steps of one epoch, batches that differ in size (a mixture's
    :class:`~loaderfactory.mixture.steps.GlobalSteps`)."""

    count: int

    def start(self, step: int) -> int: ...
    def step_at(self, position: int) -> int: ...
    def bounds(self, first: int) -> Iterator[tuple[int, int]]: ...


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """A seed for ``epoch`` that differs from every other epoch's (and per ``salt``)."""
    return (seed + (epoch + 1) * _GOLDEN + salt * 0x632BE59BD9B4E019) % 2**63


class ResumableSampler(Sampler[Any]):
    """This rank's indices of ``order``, in batches of ``batch_size`` (single indices when ``None``).

    :attr:`epoch`, :attr:`start` (the position in the epoch's global sequence to go on from) and
    :attr:`done` (batches delivered before it) are set by the loader before each pass. Each batch
    (index) carries the epoch's :class:`~loaderfactory.components.epoch_announce.EpochTag`, which
    tells a DataLoader worker that unpickles it which epoch it loads.
    """

    def __init__(self, order: RankOrder, batch_size: int | None, drop_last: bool) -> None:
        self.order = order
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.epoch = 0
        self.start = 0
        self.done = 0
        self.steps_of = check_global_batch(order.dataset, batch_size, order.world_size)
        self._first_step: tuple[int, int, int] | None = None
        """(epoch, start, the step at start) of the dataset's own global steps."""

    def __len__(self) -> int:
        return self.done + self.count(self.start)

    def count(self, start: int) -> int:
        """Batches (items, unbatched) this rank yields from position ``start`` to the epoch's end."""
        if self.steps_of is not None:
            steps = self.steps_of(self.epoch)
            return steps.count - steps.step_at(start)
        items = self.order.part_size(self.order.length - start)
        return items if self.batch_size is None else batch_count(items, self.batch_size, self.drop_last)

    def position_after(self, delivered: int) -> int:
        """The position in the epoch's sequence after ``delivered`` batches from :attr:`start`."""
        if self.steps_of is not None:  # after every batch: the pass's first step found once
            steps = self.steps_of(self.epoch)
            if self._first_step is None or self._first_step[:2] != (self.epoch, self.start):
                self._first_step = (self.epoch, self.start, steps.step_at(self.start))
            return steps.start(self._first_step[2] + delivered)
        order = self.order
        return advance(self.start, delivered, order.world_size, self.batch_size or 1, order.length)

    def __iter__(self) -> Iterator[Any]:
        order = self.order
        tag = order.tag(self.epoch)
        if self.steps_of is not None:
            return self._steps(tag)
        mine = order.part(order.sequence(self.epoch), self.start)
        if self.batch_size is None:
            return (TaggedIndex(index, tag) for index in mine)
        step = mine.step if isinstance(mine, range) else None
        batches = iter_batches(mine, self.batch_size, self.drop_last)
        return (TaggedBatch(batch, tag, step) for batch in batches)

    def _steps(self, tag: EpochTag) -> Iterator[TaggedBatch]:
        """This rank's part of each of the dataset's global steps (batches that differ in size)."""
        order = self.order
        order.sequence(self.epoch)  # tells the dataset its epoch, as every pass does
        assert self.steps_of is not None  # only then are the steps the dataset's
        steps = self.steps_of(self.epoch)
        for start, end in steps.bounds(steps.step_at(self.start)):
            mine = rank_part(range(start, end), order.rank, order.world_size, order.balance)
            yield TaggedBatch(list(mine), tag, mine.step if isinstance(mine, range) else None)


def check_global_batch(
    dataset: Any, batch_size: int | None, world_size: int
) -> Callable[[int], GlobalSteps] | None:
    """Refuse batches cut across what ``dataset`` mixes as one global batch (``global_batch``: a
    mixture's stratified or per_source batching); its ``global_steps`` where its steps differ in
    size (each must split evenly between ranks), else None."""
    wanted = getattr(dataset, "global_batch", None)
    if wanted is None:
        return None
    if batch_size is None or batch_size * world_size != wanted:
        made = "no batches" if batch_size is None else f"batches of {batch_size * world_size}"
        raise ArgumentError(
            "batch_size",
            f"the mixture mixes global batches of {wanted} samples (its global_batch), but batch_size "
            f"{batch_size} on {world_size} rank(s) makes {made}: "
            "make batch_size × world size its global_batch",
        )
    steps_of = getattr(dataset, "global_steps", None)
    if not callable(steps_of) or steps_of(0) is None:
        return None
    uneven = {name: size for name, size in dataset.step_sizes().items() if size % world_size}
    if uneven:
        raise ArgumentError(
            "batch_size",
            f"the global steps of mixture sources {uneven} (name: samples) do not split evenly between "
            f"{world_size} ranks: make each source's global_batch a multiple of the world size",
        )
    return steps_of  # type: ignore[no-any-return]  # a mixture's, as its global_steps says


class ReplayedSampler(Sampler[Any]):
    """A sampler of yours, restartable at any batch: each pass skips the first :attr:`start` entries.

    Before each pass, the sampler (or its inner ``sampler``, for a ``BatchSampler``) gets its epoch:
    ``set_epoch(epoch)`` when it has one (``DistributedSampler``); else, when it draws from a
    ``generator`` attribute (torch's ``RandomSampler``, ``WeightedRandomSampler``,
    ``SubsetRandomSampler``), a new generator for the epoch, seeded from the generator's own seed
    when it came with one (epoch 0 then draws exactly what it would have), else from ``seed``.
    Resuming is exact when the sampler's order is a function of those.
    """

    def __init__(self, inner: Iterable[Any], seed: int) -> None:
        self.inner = inner
        self.seed = seed
        self.epoch = 0
        self.start = 0
        self.done = 0
        self._sources: list[Any] = [s for s in (inner, getattr(inner, "sampler", None)) if s is not None]
        self._own_seeds = {
            id(s): s.generator.initial_seed()
            for s in self._sources
            if isinstance(getattr(s, "generator", None), torch.Generator)
        }

    def position_after(self, delivered: int) -> int:
        """Entries of the sampler consumed after ``delivered`` more from :attr:`start`."""
        return self.start + delivered

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]  # TypeError for an unsized sampler, as torch's

    def __iter__(self) -> Iterator[Any]:
        for source in self._sources:
            set_epoch = getattr(source, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)
            elif hasattr(source, "generator"):
                source.generator = torch.Generator().manual_seed(self._epoch_seed(source))
        return itertools.islice(iter(self.inner), self.start, None)

    def _epoch_seed(self, source: object) -> int:
        own = self._own_seeds.get(id(source))
        if own is None:
            return epoch_seed(self.seed, self.epoch, salt=2)
        return own if self.epoch == 0 else epoch_seed(own, self.epoch, salt=2)
