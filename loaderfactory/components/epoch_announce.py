"""The epoch a DataLoader worker process is loading, told by the indices the sampler sends it.

A dataset in a worker is a copy made when the worker started (forked or spawned, persistent or not),
so it cannot see ``epoch_order`` / ``set_epoch`` called later in the main process. What does reach
the worker is each index batch the sampler yields: torch pickles it unchanged through the worker's
index queue, and the worker passes it to ``dataset.__getitems__`` (or a single index to
``dataset[index]``). :class:`ResumableSampler <loaderfactory.components.samplers.ResumableSampler>`
yields :class:`TaggedBatch` (a ``list``) or :class:`TaggedIndex` (an ``int``) carrying the epoch's
:class:`EpochTag`; unpickling one records the tag here, as this process's announced epoch, right
before the worker reads that batch. A dataset in a worker reads :func:`announced` on each read, so
wrappers (torch's ``Subset``, a user's) need not forward anything.

A tag costs its three ints in each pickled batch; unpickled, the batch is a plain ``list`` again
(a :class:`TaggedBatch` when it is a slice of a range, which it says).
A dataset that reads another one pass at a time (a mixture) tells it that pass with
:func:`reading_as`, which wins over the announced epoch, in the main process too.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from loaderfactory.thread_setting import ThreadSetting


class EpochTag(NamedTuple):
    """The epoch a batch belongs to: ``(seed, epoch)`` as the order engine was asked for it, and
    whether the order is the dataset's own shuffled one (``epoch_order(seed, epoch)``)."""

    seed: int
    epoch: int
    shuffled: bool


_announced: EpochTag | None = None


def announce(tag: EpochTag) -> None:
    """Make ``tag`` this process's announced epoch."""
    global _announced  # one value per process: the epoch its worker loads now
    _announced = tag


def announced() -> EpochTag | None:
    """The epoch last announced in this process; None before any (the main process, or a sampler
    that tags nothing)."""
    return _announced


class TaggedBatch(list[Any]):
    """An index batch that announces ``tag`` in the process that unpickles it; equal to, and used
    as, the plain list. ``step``: the batch is every ``step``-th index from its first (a slice of a
    range), which a dataset may use to read it as a run."""

    __slots__ = ("step", "tag")

    def __init__(self, indices: list[Any], tag: EpochTag, step: int | None = None) -> None:
        super().__init__(indices)
        self.tag = tag
        self.step = step

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickle_batch, (list(self), *self.tag, self.step)


class TaggedIndex(int):
    """A single index that announces ``tag`` in the process that unpickles it; an ``int``."""

    tag: EpochTag

    def __new__(cls, index: int, tag: EpochTag) -> TaggedIndex:
        made = super().__new__(cls, index)
        made.tag = tag
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickle_index, (int(self), *self.tag)


def _unpickle_batch(
    indices: list[Any], seed: int, epoch: int, shuffled: bool, step: int | None = None
) -> list[Any]:
    tag = EpochTag(seed, epoch, shuffled)
    announce(tag)
    return indices if step is None else TaggedBatch(indices, tag, step)


def _unpickle_index(index: int, seed: int, epoch: int, shuffled: bool) -> int:
    announce(EpochTag(seed, epoch, shuffled))
    return index


_told: ThreadSetting[EpochTag] = ThreadSetting()


def reading_as(tag: EpochTag) -> AbstractContextManager[None]:
    """Within the block, this thread reads datasets as of ``tag``, in any process: a mixture reading
    one pass of its source tells the source that pass, workers or not."""
    return _told.given(tag)


def reading_tag(in_worker: bool) -> EpochTag | None:
    """The epoch a dataset reads as now: the one :func:`reading_as` tells this thread, else, in a
    DataLoader worker, the one its batches announce; None: the dataset's own."""
    told = _told.get()
    if told is not None:
        return told
    return announced() if in_worker else None
