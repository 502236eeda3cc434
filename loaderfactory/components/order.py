"""The order engine: which indices an epoch visits, in which order, and which of them a rank loads.

Every kind that orders items (the ``torch`` and ``sharded`` loaders, the queue's filler) takes its
order from here, so the same ``seed`` gives the same order in every kind, and everything is a pure
function of its arguments: the same on every rank, in every process, after every restart.

* :func:`epoch_order` is the epoch's **global sequence**: ``range(length)``, a permutation seeded
  by ``(seed, epoch)`` (:func:`permutation`), or the dataset's own order (:class:`OrderedDataset`)
  when it offers one, itself or through the dataset it wraps
  (:mod:`~loaderfactory.components.order_forwarding`).
* The sequence is consumed in **steps**: with ``world_size`` ranks each taking ``per_rank`` indices
  a step, step ``k`` consumes the contiguous block ``[k * world_size * per_rank, (k + 1) * ...)``,
  and rank ``r`` takes every ``world_size``-th index of it, starting at ``r`` (:func:`rank_part`).
* A **position** is a count of indices of the sequence consumed so far. It is the same on every
  rank and means the same at any world size, so a state saved by one rank resumes every rank, and a
  state saved at world size W resumes at W′: the rest of the sequence is split between the new
  ranks, each remaining index delivered exactly once (``pad``'s repeats aside).
  A state records which order it counted in, and is refused mid-epoch by a loader that reads in
  another (:mod:`~loaderfactory.components.order_state`).
* ``balance`` makes ranks take equally many indices: ``pad`` wraps the sequence around from its
  start, ``drop`` cuts the last few, ``uneven`` does neither (ranks then differ by at most one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from loaderfactory.components.epoch_announce import EpochTag
from loaderfactory.components.order_forwarding import order_of, order_source
from loaderfactory.components.order_permutation import permutation as permutation

Balance = Literal["pad", "drop", "uneven"]
BALANCE: tuple[Balance, ...] = ("pad", "drop", "uneven")


@runtime_checkable
class OrderedDataset(Protocol):
    """A map-style dataset that chooses its own shuffled order (shards read a few at a time, say).

    ``epoch_order(seed, epoch)`` returns a permutation of ``range(len(dataset))`` that depends only
    on its arguments; every kind uses it instead of a uniform permutation when it shuffles.
    """

    def __len__(self) -> int: ...

    def epoch_order(self, seed: int, epoch: int) -> Sequence[int]: ...


def epoch_order(length: int, seed: int, epoch: int, shuffle: bool, dataset: Any = None) -> Sequence[int]:
    """The epoch's global sequence of indices: the same on every rank for the same arguments.

    Args:
        length: items in the dataset.
        seed: the shuffle's seed; every rank must pass the same one.
        epoch: the epoch (each has its own permutation).
        shuffle: ``False``: ``0, 1, ..., length - 1``.
        dataset: when it is an :class:`OrderedDataset`, its ``epoch_order`` gives the shuffled order;
            unshuffled, a dataset with ``set_epoch`` (the ``DistributedSampler`` convention) is told
            the epoch, so what it draws per epoch (random transforms) differs between epochs.
    """
    if not shuffle:
        numbered = getattr(dataset, "set_epoch", None)
        if callable(numbered):
            numbered(epoch)
        return range(length)  # lazy: an epoch of 10^8 items costs nothing to order
    own = order_of(dataset)
    if own is not None:
        given = own(seed, epoch)
        if isinstance(given, range) and given == range(length):  # a dataset that orders itself (a mixture)
            return given
        order = np.asarray(given, dtype=np.int64).reshape(-1)
        if order.size != length or (length and np.bincount(order, minlength=length).max(initial=0) != 1):
            raise ValueError(
                f"{type(dataset).__name__}.epoch_order({seed}, {epoch}) must return a permutation of "
                f"range({length}); got {order.size} indices"
            )
        return order.tolist()
    return permutation(length, seed, epoch)


def rank_part(
    sequence: Sequence[Any], rank: int, world_size: int, balance: Balance = "pad", start: int = 0
) -> Sequence[Any]:
    """What ``rank`` of ``world_size`` takes of ``sequence[start:]``: every ``world_size``-th entry.

    ``pad`` wraps around from ``sequence[0]`` (not from ``start``) until the rest divides by
    ``world_size``, so resuming at the same world size takes exactly what an unbroken epoch would.
    A ``range`` stays a ``range`` unless padded: ordering a long unshuffled epoch builds no list.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    rest: Sequence[Any] = sequence[start:]
    if world_size == 1:
        return rest if isinstance(rest, range) else list(rest)
    extra = len(rest) % world_size
    if balance == "drop" and extra:
        rest = rest[: len(rest) - extra]
    elif balance == "pad" and extra:
        rest = [*rest, *(sequence[i % len(sequence)] for i in range(world_size - extra))]
    return rest[rank::world_size]


def rank_count(length: int, rank: int, world_size: int, balance: Balance = "pad") -> int:
    """``len(rank_part(range(length), rank, world_size, balance))`` without building it."""
    if balance == "drop":
        return length // world_size
    if balance == "pad":
        return -(-length // world_size)
    return len(range(rank, length, world_size))


def batches(indices: Sequence[int], batch_size: int, drop_last: bool) -> list[list[int]]:
    """``indices`` cut into batches of ``batch_size``; the short last one dropped with ``drop_last``."""
    return list(iter_batches(indices, batch_size, drop_last))


def iter_batches(indices: Sequence[int], batch_size: int, drop_last: bool) -> Iterator[list[int]]:
    """:func:`batches`, one at a time: a long epoch's batches are made as they are taken."""
    end = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    return (list(indices[i : i + batch_size]) for i in range(0, end, batch_size))


def batch_count(items: int, batch_size: int, drop_last: bool) -> int:
    """``len(batches(range(items), batch_size, drop_last))``."""
    return items // batch_size if drop_last else -(-items // batch_size)


def advance(position: int, steps: int, world_size: int, per_rank: int, length: int) -> int:
    """The position after ``steps`` more steps of ``per_rank`` indices on each of ``world_size`` ranks.

    Never past ``length``: the last step of an epoch may be short, and padding is not counted.
    """
    return min(length, position + steps * world_size * per_rank)


@dataclass
class RankOrder:
    """One rank's view of a dataset's epoch orders: what every kind that orders items holds.

    ``seed`` may change once, when a loaded state brings the seed of the run that saved it.
    """

    length: int
    seed: int
    shuffle: bool = False
    rank: int = 0
    world_size: int = 1
    balance: Balance = "pad"
    dataset: Any = None
    """Offers its own shuffled order when it is an :class:`OrderedDataset`."""

    def sequence(self, epoch: int) -> Sequence[int]:
        """The epoch's global sequence (:func:`epoch_order`)."""
        return epoch_order(self.length, self.seed, epoch, self.shuffle, self.dataset)

    def tag(self, epoch: int) -> EpochTag:
        """What the batches of ``epoch`` tell a DataLoader worker (:mod:`.epoch_announce`): the seed
        and epoch :meth:`sequence` passed to the dataset's ``epoch_order``, if it used it."""
        own = self.shuffle and order_source(self.dataset) != "uniform"
        return EpochTag(self.seed, epoch, own)

    def part(self, sequence: Sequence[Any], start: int = 0) -> Sequence[Any]:
        """This rank's part of ``sequence[start:]`` (:func:`rank_part`)."""
        return rank_part(sequence, self.rank, self.world_size, self.balance, start)

    def part_size(self, items: int) -> int:
        """How many of ``items`` this rank takes (:func:`rank_count`)."""
        return rank_count(items, self.rank, self.world_size, self.balance)
