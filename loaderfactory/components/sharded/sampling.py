"""Which indices each rank loads, in which steps: the epoch plan of a :class:`ShardedDataLoader`.

Pure Python (no torch), so the rules can be checked exhaustively:

* one global order per epoch (sequential, a user sampler, or a permutation seeded by
  ``(seed, epoch)``), identical on every rank;
* ranks take strided slices of it (``order[rank::world_size]``), after padding the order by
  wrapping (``pad``) or cutting it (``drop``) to a multiple of ``world_size``, so every rank gets
  the same number of indices; ``uneven`` cuts nothing and pads nothing;
* a rank's indices, after the ``rollover`` carried in from its previous epoch, are cut into steps
  of ``num_shards`` batches of ``batch_size`` indices; ``last_batch`` decides the incomplete rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

LastBatch = Literal["keep", "discard", "rollover"]
Balance = Literal["pad", "drop", "uneven"]
Step = list[int] | list[list[int]]
"""One batch's indices, or (with shards) one list of indices per shard."""

LAST_BATCH: tuple[LastBatch, ...] = ("keep", "discard", "rollover")
BALANCE: tuple[Balance, ...] = ("pad", "drop", "uneven")


def epoch_permutation(length: int, seed: int, epoch: int) -> list[int]:
    """A permutation of ``range(length)`` that depends only on ``(seed, epoch)``: the same on every rank."""
    rng = np.random.default_rng([seed, epoch])
    return [int(i) for i in rng.permutation(length)]


def assign_shards(items: Sequence[Any], rank: int, world_size: int, balance: Balance = "pad") -> list[Any]:
    """The part of ``items`` (indices or steps) that ``rank`` of ``world_size`` takes.

    ``pad`` wraps ``items`` around until its length divides by ``world_size`` (a few items are
    seen twice per epoch), ``drop`` cuts the last ``len(items) % world_size`` (a few are skipped),
    ``uneven`` does neither: ranks then differ by at most one item and collective ops need
    ``torch.distributed.algorithms.Join``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    items = list(items)
    if world_size == 1:
        return items
    n = len(items)
    if balance == "drop":
        items = items[: n - n % world_size]
    elif balance == "pad" and n % world_size and n:
        total = -(-n // world_size) * world_size
        items = [items[i % n] for i in range(total)]
    return items[rank::world_size]


def rank_size(length: int, rank: int, world_size: int, balance: Balance = "pad") -> int:
    """``len(assign_shards(range(length), rank, world_size, balance))`` without building it."""
    if balance == "drop":
        return length // world_size
    if balance == "pad":
        return -(-length // world_size)
    return len(range(rank, length, world_size))


def cut_steps(
    indices: Sequence[int], carry: Sequence[int], batch_size: int, last_batch: LastBatch, num_shards: int = 1
) -> tuple[list[Step], list[int]]:
    """Cut ``carry + indices`` into steps; returns the steps and the rollover for the next epoch.

    A step is one batch (``num_shards == 1``) or a list of ``num_shards`` batches. The rest that
    fills no whole step is yielded short (``keep``; with shards, the missing shards are filled
    with the epoch's first batches again so every step has ``num_shards`` of them), dropped
    (``discard``) or carried into the next epoch (``rollover``).
    """
    pool = [*carry, *indices]
    per_step = batch_size * num_shards
    whole = len(pool) - len(pool) % per_step
    batches = [pool[i : i + batch_size] for i in range(0, whole, batch_size)]
    rest = pool[whole:]
    rollover: list[int] = []
    if rest and last_batch == "keep":
        batches += [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
        missing = -len(batches) % num_shards
        batches += [
            [pool[(j * batch_size + t) % len(pool)] for t in range(batch_size)] for j in range(missing)
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
    """What one rank loads in one epoch: its steps, and the indices it carries into the next."""

    epoch: int
    steps: list[Step]
    carry_in: list[int]
    carry_out: list[int]


class ShardPlanner:
    """Turns ``(epoch, rollover)`` into the steps of one rank; see the module docstring for the rules.

    Args:
        length: items in the dataset (used when there is neither a sampler nor a batch sampler).
        batch_size: indices per batch (``None`` with a batch sampler).
        shuffle: permute the order each epoch with a generator seeded by ``(seed, epoch)``.
        sampler: an iterable of indices replacing the order; its ``set_epoch`` is called if it has one.
        batch_sampler: an iterable of steps (a list of indices, or a list of lists for shards),
            split between ranks step by step.
        last_batch: ``keep``, ``discard`` or ``rollover``.
        num_shards: batches per step.
        seed: base seed of the shuffle; must be the same on every rank.
        rank, world_size: this process's place among the data-parallel processes.
        balance: ``pad``, ``drop`` or ``uneven`` (see :func:`assign_shards`).
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
    ) -> None:
        self.length = length
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.last_batch = last_batch
        self.num_shards = num_shards
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.balance = balance

    def plan(self, epoch: int, carry: Sequence[int] = ()) -> EpochPlan:
        """The steps of ``epoch`` for this rank, given the rollover carried into it."""
        if self.batch_sampler is not None:
            _set_epoch(self.batch_sampler, epoch)
            steps: list[Step] = [_as_step(s) for s in self.batch_sampler]
            mine = assign_shards(steps, self.rank, self.world_size, self.balance)
            return EpochPlan(epoch, mine, [], [])
        order = self._order(epoch)
        indices = assign_shards(order, self.rank, self.world_size, self.balance)
        assert self.batch_size is not None  # the loader checks this on construction
        steps, carry_out = cut_steps(indices, carry, self.batch_size, self.last_batch, self.num_shards)
        return EpochPlan(epoch, steps, list(carry), carry_out)

    def count(self, carry: int = 0) -> int:
        """Steps of the next epoch for this rank (raises ``TypeError`` for an unsized sampler)."""
        if self.batch_sampler is not None:
            total = len(self.batch_sampler)  # type: ignore[arg-type]  # TypeError when unsized, as len() should
            return rank_size(total, self.rank, self.world_size, self.balance)
        source: Any = self.sampler if self.sampler is not None else self.length
        total = len(source) if isinstance(source, Sized) else int(source)
        mine = rank_size(total, self.rank, self.world_size, self.balance)
        assert self.batch_size is not None  # the loader checks this on construction
        return count_steps(mine, carry, self.batch_size, self.last_batch, self.num_shards)

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
        share = rank_size(total, self.rank, self.world_size, self.balance)
        place = f"rank {self.rank} of {self.world_size}"
        if total and not share:
            return (
                "balance",
                f"{self.balance!r} leaves {place} no data: an epoch has {total} {unit}, fewer than the "
                f"{self.world_size} ranks; use balance 'pad' (repeats a few) or fewer ranks",
            )
        step = (self.batch_size or 0) * self.num_shards  # batch_size is None with a batch_sampler only
        if share and self.batch_sampler is None and self.last_batch == "discard" and share < step:
            return (
                "last_batch",
                f"'discard' leaves {place} no batches: it gets {share} indices per epoch, fewer than one "
                f"step of {step}; use last_batch 'keep' or 'rollover', or a smaller batch_size",
            )
        return None

    def _order(self, epoch: int) -> list[int]:
        if self.sampler is not None:
            _set_epoch(self.sampler, epoch)
            return [int(i) for i in self.sampler]
        assert self.length is not None  # the loader checks this on construction
        if self.shuffle:
            return epoch_permutation(self.length, self.seed, epoch)
        return list(range(self.length))


def _set_epoch(source: object, epoch: int) -> None:
    set_epoch = getattr(source, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _as_step(step: Any) -> Step:
    step = list(step)
    if step and isinstance(step[0], Sequence | np.ndarray) and not isinstance(step[0], str):
        return [[int(i) for i in shard] for shard in step]
    return [int(i) for i in step]
