"""Which indices each rank loads, in which steps: the epoch plan of a :class:`ShardedDataLoader`.

The order comes from :mod:`loaderfactory.components.order` (one global sequence per epoch, a
position counted in it, ranks taking strided parts); what is particular to this kind is here:

* the epoch's **pool** is the rollover carried in from the previous epoch, then the epoch's order;
* a step is ``num_shards`` batches of ``batch_size`` indices per rank, so it consumes a block of
  ``world_size * batch_size * num_shards`` indices of the pool;
* ``last_batch`` decides the rest that fills no whole step: ``keep`` (short, on ranks balanced by
  ``balance``), ``discard``, or ``rollover`` (carried, whole, into the next epoch's pool: the same
  on every rank, so ``balance`` does not apply).

A batch sampler of yours gives steps instead; they are split between ranks step by step, and a
position then counts this rank's steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from loaderfactory.components.epoch_announce import TaggedBatch
from loaderfactory.components.order import BALANCE, Balance, RankOrder, rank_part
from loaderfactory.components.samplers import check_global_batch
from loaderfactory.errors import ArgumentError

LastBatch = Literal["keep", "discard", "rollover"]
Step = list[int] | list[list[int]]
"""One batch's indices, or (with shards) one list of indices per shard."""

LAST_BATCH: tuple[LastBatch, ...] = ("keep", "discard", "rollover")
__all__ = [
    "BALANCE",
    "LAST_BATCH",
    "Balance",
    "EpochPlan",
    "LastBatch",
    "ShardPlanner",
    "Step",
    "count_steps",
    "cut_steps",
]


def cut_steps(
    indices: Sequence[int],
    carry: Sequence[int],
    batch_size: int,
    last_batch: LastBatch,
    num_shards: int = 1,
    filler: Sequence[int] | None = None,
) -> tuple[list[Step], list[int]]:
    """Cut ``carry + indices`` into steps; returns the steps and the rollover for the next epoch.

    A step is one batch (``num_shards == 1``) or a list of ``num_shards`` batches. The rest that
    fills no whole step is yielded short (``keep``; with shards, the missing shards are filled
    with the first batches of ``filler`` (by default the pool itself) so every step has
    ``num_shards`` of them), dropped (``discard``) or carried into the next epoch (``rollover``).
    """
    pool = [*carry, *indices]
    source = pool if filler is None or not filler else list(filler)
    per_step = batch_size * num_shards
    whole = len(pool) - len(pool) % per_step
    batches = [pool[i : i + batch_size] for i in range(0, whole, batch_size)]
    rest = pool[whole:]
    rollover: list[int] = []
    if rest and last_batch == "keep":
        batches += [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
        missing = -len(batches) % num_shards
        batches += [
            [source[(j * batch_size + t) % len(source)] for t in range(batch_size)] for j in range(missing)
        ]
    elif rest and last_batch == "rollover":
        rollover = rest
    if num_shards == 1:
        return list(batches), rollover
    return [batches[i : i + num_shards] for i in range(0, len(batches), num_shards)], rollover


def count_steps(length: int, carry: int, batch_size: int, last_batch: LastBatch, num_shards: int = 1) -> int:
    """``len(cut_steps(...)[0])`` from the sizes alone."""
    pool = carry + length
    per_step = batch_size * num_shards
    return pool // per_step + (1 if pool % per_step and last_batch == "keep" else 0)


@dataclass(frozen=True)
class EpochPlan:
    """What one rank loads of one epoch from ``start`` on, and what the epoch carries into the next.

    ``start`` and :meth:`position_after` count indices of the epoch's pool (steps of this rank with a
    batch sampler): the same on every rank, whatever the world size.
    """

    epoch: int
    steps: list[Step]
    carry_in: list[int]
    carry_out: list[int]
    start: int = 0
    done: int = 0
    """Steps delivered before ``start``: ``done + len(steps)`` is the epoch's length in steps."""
    block: int = 1
    """Pool indices one step consumes on all ranks together (1 with a batch sampler: one own step)."""
    end: int = 0
    """The position once every step is delivered."""

    def position_after(self, delivered: int) -> int:
        """The position after ``delivered`` of :attr:`steps`."""
        return min(self.end, self.start + delivered * self.block)


class ShardPlanner:
    """Turns ``(epoch, rollover, position)`` into the steps of one rank; see the module docstring.

    Args:
        length: items in the dataset (used when there is neither a sampler nor a batch sampler).
        batch_size: indices per batch (``None`` with a batch sampler).
        shuffle: the epoch's order from :func:`~loaderfactory.components.order.epoch_order`.
        sampler: an iterable of indices replacing the order; its ``set_epoch`` is called if it has one.
        batch_sampler: an iterable of steps (a list of indices, or a list of lists for shards),
            split between ranks step by step.
        last_batch: ``keep``, ``discard`` or ``rollover``.
        num_shards: batches per step.
        seed: base seed of the shuffle; must be the same on every rank.
        rank, world_size: this process's place among the data-parallel processes.
        balance: ``pad``, ``drop`` or ``uneven`` (see :func:`~loaderfactory.components.order.rank_part`).
        dataset: offers its own shuffled order when it is an
            :class:`~loaderfactory.components.order.OrderedDataset`.
    """

    def __init__(
        self,
        length: int | None,
        batch_size: int | None,
        *,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        batch_sampler: Iterable[Step] | None = None,
        last_batch: LastBatch = "keep",
        num_shards: int = 1,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        balance: Balance = "pad",
        dataset: Any = None,
    ) -> None:
        self.length = length
        self.batch_size = batch_size
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.last_batch = last_batch
        self.num_shards = num_shards
        self.order = RankOrder(length or 0, seed, shuffle, rank, world_size, balance, dataset)
        if sampler is None and batch_sampler is None and check_global_batch(dataset, batch_size, world_size):
            raise ArgumentError(
                "kind",
                "a mixture whose sources have their own global_batch cuts batches of different sizes: "
                "read it with loader kind torch",
            )

    @property
    def elastic(self) -> bool:
        """Whether a position means the same at any world size (not with a batch sampler's steps)."""
        return self.batch_sampler is None

    def plan(self, epoch: int, carry: Sequence[int] = (), start: int = 0, done: int = 0) -> EpochPlan:
        """This rank's steps of ``epoch`` from position ``start``, given the rollover carried into it;
        each step tells a process worker which epoch it loads (:mod:`..epoch_announce`)."""
        plan = self._plan(epoch, carry, start, done)
        if self.batch_sampler is not None or self.sampler is not None:
            return plan
        tag = self.order.tag(epoch)
        return dataclasses.replace(plan, steps=[TaggedBatch(step, tag) for step in plan.steps])

    def _plan(self, epoch: int, carry: Sequence[int], start: int, done: int) -> EpochPlan:
        if self.batch_sampler is not None:
            _set_epoch(self.batch_sampler, epoch)
            steps: list[Step] = [_as_step(s) for s in self.batch_sampler]
            taken = list(self.order.part(steps))
            return EpochPlan(epoch, taken[start:], [], [], start, start, 1, len(taken))
        assert self.batch_size is not None  # the loader checks this on construction
        pool = [*carry, *self._order(epoch)]
        per_step = self.batch_size * self.num_shards
        block = per_step * self.order.world_size
        if self.last_batch == "rollover":
            rest = len(pool) - start
            whole = start + rest - rest % block
            mine = rank_part(pool[:whole], self.order.rank, self.order.world_size, "uneven", start)
            steps, _ = cut_steps(mine, [], self.batch_size, "discard", self.num_shards)
            return EpochPlan(epoch, steps, list(carry), pool[whole:], start, done, block, whole)
        mine = self.order.part(pool, start)
        filler = self.order.part(pool) if start else None
        steps, _ = cut_steps(mine, [], self.batch_size, self.last_batch, self.num_shards, filler)
        return EpochPlan(epoch, steps, list(carry), [], start, done, block, len(pool))

    def count(self, carry: int = 0, start: int = 0) -> int:
        """Steps of the next epoch for this rank from ``start`` (``TypeError`` for an unsized sampler)."""
        if self.batch_sampler is not None:
            total = len(self.batch_sampler)  # type: ignore[arg-type]  # TypeError when unsized, as len() should
            return self.order.part_size(total) - start
        assert self.batch_size is not None  # the loader checks this on construction
        rest = carry + self.total() - start
        per_step = self.batch_size * self.num_shards
        if self.last_batch == "rollover":
            return rest // (per_step * self.order.world_size)
        mine = self.order.part_size(rest)
        return count_steps(mine, 0, self.batch_size, self.last_batch, self.num_shards)

    def total(self) -> int:
        """Indices of an epoch's order (``TypeError`` for an unsized sampler)."""
        source: Any = self.sampler if self.sampler is not None else self.length
        return len(source) if isinstance(source, Sized) else int(source)

    def why_empty(self) -> tuple[str, str] | None:
        """``(argument, reason)`` when this rank gets no step in an epoch although the data has some.

        Told from sizes (an unsized sampler is never reported), for the builder to warn at the
        argument's config path. ``rollover`` is not reported: it carries what it holds forward.
        """
        source = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if source is None:
            total = self.length or 0
        elif isinstance(source, Sized):
            total = len(source)
        else:
            return None
        unit = "steps" if self.batch_sampler is not None else "indices"
        order = self.order
        share = order.part_size(total)
        place = f"rank {order.rank} of {order.world_size}"
        if total and not share:
            return (
                "balance",
                f"{order.balance!r} leaves {place} no data: an epoch has {total} {unit}, fewer than the "
                f"{order.world_size} ranks; use balance 'pad' (repeats a few) or fewer ranks",
            )
        step = (self.batch_size or 0) * self.num_shards  # batch_size is None with a batch_sampler only
        if share and self.batch_sampler is None and self.last_batch == "discard" and share < step:
            return (
                "last_batch",
                f"'discard' leaves {place} no batches: it gets {share} indices per epoch, fewer than one "
                f"step of {step}; use last_batch 'keep' or 'rollover', or a smaller batch_size",
            )
        return None

    def _order(self, epoch: int) -> Sequence[int]:
        if self.sampler is not None:
            _set_epoch(self.sampler, epoch)
            return [int(i) for i in self.sampler]
        return self.order.sequence(epoch)


def _set_epoch(source: object, epoch: int) -> None:
    set_epoch = getattr(source, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _as_step(step: Any) -> Step:
    step = list(step)
    if step and isinstance(step[0], Sequence | np.ndarray) and not isinstance(step[0], str):
        return [[int(i) for i in shard] for shard in step]
    return [int(i) for i in step]
