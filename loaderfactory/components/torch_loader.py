"""A ``torch.utils.data.DataLoader`` that can stop after any batch and resume after it.

The order of an epoch depends only on ``(seed, epoch)``, and the sampler can start at any batch,
so a restored loader skips the batches already delivered without loading them, with or without
worker processes (the sampler runs in the main process; workers only load the indices it hands
out). Worker base seeds are drawn from a generator seeded by ``(seed, epoch)`` too.
"""

from __future__ import annotations

import itertools
import math
import secrets
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler

from loaderfactory.components.sharded.sampling import Balance, assign_shards, rank_size
from loaderfactory.components.state import check_matching, require_int, require_keys, require_state
from loaderfactory.components.workers.lifecycle import grace
from loaderfactory.components.workers.watched import WatchedPass, start_pass, stop_loader_workers
from loaderfactory.errors import ResumeError

_GOLDEN = 0x9E3779B97F4A7C15


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """A seed for ``epoch`` that differs from every other epoch's (and per ``salt``)."""
    return (seed + (epoch + 1) * _GOLDEN + salt * 0x632BE59BD9B4E019) % 2**63


class ResumableSampler(Sampler[Any]):
    """This rank's indices of ``length`` items, in batches of ``batch_size`` (single indices when ``None``).

    The order of an epoch is a function of ``(seed, epoch)``, the same on every rank; each rank
    takes its strided part of it (``balance``: see
    :func:`~loaderfactory.components.sharded.sampling.assign_shards`). :attr:`epoch` and
    :attr:`start` (the first batch to yield) are set by the loader before each pass.
    """

    def __init__(
        self,
        length: int,
        batch_size: int | None,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        balance: Balance = "pad",
    ) -> None:
        self.length = length
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.balance = balance
        self.epoch = 0
        self.start = 0

    def __len__(self) -> int:
        items = rank_size(self.length, self.rank, self.world_size, self.balance)
        if self.batch_size is None:
            return items
        if self.drop_last:
            return items // self.batch_size
        return math.ceil(items / self.batch_size)

    def order(self, epoch: int) -> list[int]:
        """This rank's indices of ``epoch``."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        return assign_shards(order, self.rank, self.world_size, self.balance)

    def __iter__(self) -> Iterator[Any]:
        order = self.order(self.epoch)
        size = self.batch_size
        if size is None:
            yield from order[self.start :]
            return
        for number in range(self.start, len(self)):
            yield order[number * size : (number + 1) * size]


class ReplayedSampler(Sampler[Any]):
    """A sampler of yours, restartable at any batch: each pass calls its ``set_epoch(epoch)`` (when it
    has one, or its inner ``sampler`` has) and skips the first :attr:`start` entries.

    Resuming is exact when the sampler's order is a function of its epoch (``DistributedSampler``,
    or any sampler given a seeded generator that ``set_epoch`` reseeds).
    """

    def __init__(self, inner: Iterable[Any]) -> None:
        self.inner = inner
        self.epoch = 0
        self.start = 0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]  # TypeError for an unsized sampler, as torch's

    def __iter__(self) -> Iterator[Any]:
        for source in (self.inner, getattr(self.inner, "sampler", None)):
            set_epoch = getattr(source, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)
        return itertools.islice(iter(self.inner), self.start, None)


class ResumableDataLoader(DataLoader[Any]):
    """A ``DataLoader`` with ``state_dict()`` / ``load_state_dict()``, rank-aware.

    Each ``iter()`` is an epoch, as with a plain ``DataLoader``; a pass left unfinished counts as
    an epoch, and :meth:`set_epoch` numbers the next one (torch's ``DistributedSampler``
    convention). The state is the epoch and the batches this loader has handed out in it, so a
    loader restored from it yields exactly the rest of that epoch and then the next ones.
    Shuffling without a ``seed`` draws one at random and records it in the state.

    Exactness needs the data to be a function of the index (as with seeded per-item randomness):
    the global random streams inside worker processes are not part of the state.

    A map-style dataset is resumed by the sampler; an iterable dataset keeps its own position
    (its slot restores it) and can only be resumed without worker processes, which would hold
    its position out of reach. With worker processes, an iterable dataset must split its stream
    between them with ``torch.utils.data.get_worker_info()``, as with any ``DataLoader``.

    Args:
        dataset: map-style or iterable dataset.
        batch_size: items per batch; ``None`` passes items through unbatched.
        shuffle: a new permutation per epoch, from ``(seed, epoch)``.
        drop_last: drop the last, smaller batch.
        seed: seed of the permutations and of the workers' base seeds.
        sampler: your order of the items instead of ``shuffle`` (replayed by :class:`ReplayedSampler`).
        batch_sampler: your batches of indices instead of ``batch_size``, ``shuffle``, ``sampler``
            and ``drop_last``.
        rank, world_size: this process's place among data-parallel processes: each rank loads its
            strided part of the same per-epoch order, with ``balance`` deciding the remainder
            (``pad`` by default: every rank the same number of batches).
        **kwargs: other ``DataLoader`` arguments (``num_workers``, ``collate_fn``, ...).
    """

    _live: weakref.ref[Any] | None = None
    """The pass now running (torch's iterator, watched), so that ``close()`` can stop its workers."""

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
        *,
        sampler: Iterable[Any] | None = None,
        batch_sampler: Iterable[Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
        balance: Balance = "pad",
        **kwargs: Any,
    ) -> None:
        self.seed_given = seed is not None
        self.seed = seed if seed is not None else secrets.randbits(63)
        self.shuffle = shuffle
        self.drop_batch = drop_last
        self.map_style = not isinstance(dataset, IterableDataset)
        self.rank, self.world_size = rank, world_size
        self._sampler: ResumableSampler | ReplayedSampler | None = None
        self._custom = type(batch_sampler if batch_sampler is not None else sampler).__name__
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, 0, salt=1))
        if self.map_style:
            plan = self._plan(dataset, batch_size, shuffle, drop_last, sampler, batch_sampler, balance)
            self._sampler = plan
            if batch_size is None and batch_sampler is None:
                super().__init__(dataset, batch_size=None, sampler=plan, generator=generator, **kwargs)
            else:
                super().__init__(dataset, batch_sampler=plan, generator=generator, **kwargs)
        else:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError(
                    "an iterable dataset yields its own order: shuffle, sampler and batch_sampler "
                    "need a map-style dataset (len and [i])"
                )
            if world_size > 1:
                raise ValueError(
                    f"an iterable dataset cannot be split between {world_size} ranks by the loader; "
                    "split it by rank in the dataset itself"
                )
            super().__init__(
                dataset, batch_size=batch_size, drop_last=drop_last, generator=generator, **kwargs
            )
        self.items_per_batch = None if batch_sampler is not None else batch_size
        self._epoch = 0
        self._position = 0
        self._active = False
        self._pending: tuple[int, int] | None = None
        self._token = 0

    def _plan(
        self,
        dataset: Dataset[Any],
        batch_size: int | None,
        shuffle: bool,
        drop_last: bool,
        sampler: Iterable[Any] | None,
        batch_sampler: Iterable[Any] | None,
        balance: Balance,
    ) -> ResumableSampler | ReplayedSampler:
        if batch_sampler is not None:
            if sampler is not None or shuffle or drop_last or batch_size is not None:
                raise ValueError(
                    "batch_sampler makes the batches itself: leave batch_size None and "
                    "shuffle, sampler and drop_last unset"
                )
            return ReplayedSampler(batch_sampler)
        if sampler is not None:
            if shuffle:
                raise ValueError("sampler gives the order itself: leave shuffle False")
            if batch_size is None:
                return ReplayedSampler(sampler)
            return ReplayedSampler(BatchSampler(sampler, batch_size, drop_last))
        if batch_size is None and drop_last:
            raise ValueError("drop_last needs batches: batch_size None passes items through unbatched")
        length = len(dataset)  # type: ignore[arg-type]  # map-style datasets are sized
        return ResumableSampler(
            length, batch_size, shuffle, drop_last, self.seed, self.rank, self.world_size, balance
        )

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches, as DataLoader does
        if self._pending is not None:
            epoch, position = self._pending
            self._pending = None
        elif self._active:
            epoch, position = self._epoch + 1, 0  # the last pass was left unfinished: a new epoch
        else:
            epoch, position = self._epoch, 0
        self._epoch, self._position, self._active = epoch, position, True
        self._token += 1
        if self._sampler is not None:
            self._sampler.epoch = epoch
            self._sampler.start = position
        self.generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch, salt=1))
        return _count(weakref.ref(self), self._token, start_pass(self, super().__iter__, "loader (torch)"))

    def __len__(self) -> int:
        """Batches of a whole epoch, also when restored mid-epoch: that pass yields only the rest.

        As torch's ``DataLoader`` and stateful loaders count it, and as PyTorch Lightning expects: it
        adds the batches it already took to what a restored pass yields. Counting only the rest would
        also go stale once a pass is abandoned, when the next pass is a whole epoch again.
        """
        return super().__len__()

    def _delivered(self, token: int) -> None:
        if token == self._token:
            self._position += 1

    def _finished(self, token: int) -> None:
        if token == self._token:
            self._epoch += 1
            self._position = 0
            self._active = False

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its order is a function of ``(seed, epoch)``).

        Calling it is optional: each pass advances the epoch. A state loaded for the same epoch
        stays in force, so ``set_epoch(e)`` at the top of a resumed training loop is safe.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if self._pending is not None and self._pending[0] == epoch:
            return
        self._pending = None
        self._epoch, self._position, self._active = epoch, 0, False

    def _settings(self) -> dict[str, Any]:
        """What decides the batch sequence; a state saved under other values is refused."""
        cached: dict[str, Any] | None = self.__dict__.get("_settings_cache")
        if cached is not None:
            return cached
        settings: dict[str, Any] = {
            "map_style": self.map_style,
            "length": len(self.dataset) if self.map_style else None,  # type: ignore[arg-type]  # map-style datasets are sized
            "batch_size": self.items_per_batch,
            "drop_last": self.drop_batch,
            "shuffle": self.shuffle,
            "sampler": self._custom if self._custom != "NoneType" else None,
            "world_size": self.world_size,
            "rank": self.rank,
        }
        if not self.map_style:
            # Without a sampler the workers' interleaving decides the order.
            settings["num_workers"] = self.num_workers
        self._settings_cache = settings  # fixed at construction; state_dict() runs after every batch
        return settings

    def state_dict(self) -> dict[str, Any]:
        """Epoch, batches handed out in it, seed and the settings a restored loader must share."""
        return self.state_from_snapshot(self.state_snapshot())

    def state_snapshot(self) -> tuple[int, int]:
        """``(epoch, position)``: all of the state that changes per batch, cheap to take after each
        one (a stage reading ahead does); :meth:`state_from_snapshot` builds the state from it."""
        return self._pending if self._pending is not None else (self._epoch, self._position)

    def state_from_snapshot(self, snapshot: tuple[int, int]) -> dict[str, Any]:
        """The :meth:`state_dict` this loader had when :meth:`state_snapshot` returned ``snapshot``."""
        if not self.map_style and self.num_workers > 0:
            raise ResumeError(
                "loader (torch): an iterable dataset read by worker processes keeps its position "
                "inside the workers; resume needs num_workers=0 or a map-style dataset"
            )
        epoch, position = snapshot
        return {"epoch": epoch, "position": position, "seed": self.seed, **self._settings()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at the saved epoch and batch on the next ``iter()``.

        Raises:
            ResumeError: the state was saved under other settings (batch size, world size, ...), or
                a field is missing, of the wrong type, or out of range (a position past the epoch).
        """
        owner = "loader (torch)"
        state = require_state(owner, state)
        require_keys(owner, state, ("epoch", "position", "seed"))
        check_matching(owner, state, self._settings())
        epoch = require_int(owner, state, "epoch")
        position = require_int(owner, state, "position", high=self._batches_per_epoch())
        seed = require_int(owner, state, "seed", low=None)
        if self.seed_given and seed != self.seed:
            check_matching(owner, state, {"seed": self.seed})
        self.seed = seed
        if isinstance(self._sampler, ResumableSampler):
            self._sampler.seed = self.seed
        self._pending = (epoch, position)
        self._active = False

    def _batches_per_epoch(self) -> int | None:
        """Batches of a whole epoch where the sampler knows it; ``None`` for an iterable dataset
        (its own slot keeps its position, and its ``len()`` may already count only the rest)."""
        if self._sampler is None:
            return None
        try:
            return len(self._sampler)
        except TypeError:  # a sampler of yours without len()
            return None


def _count(owner: weakref.ref[ResumableDataLoader], token: int, batches: Iterator[Any]) -> Iterator[Any]:
    # Holds the loader weakly so an abandoned pass never keeps it alive.
    loader = owner()
    if loader is not None:
        loader._live = weakref.ref(batches)
    del loader
    try:
        for batch in batches:
            loader = owner()
            if loader is not None:
                loader._delivered(token)
            del loader
            yield batch
    except GeneratorExit:
        # An early break: collected, torch would stop the workers one after another, 5 s each.
        if isinstance(batches, WatchedPass):
            batches.stop(grace(), keep_persistent=True)
        raise
    except BaseException:
        # A worker's exception: its workers stop at once (persistent ones too), and it goes on to
        # the loop; none outlives the pass while the caller holds the exception.
        loader = owner()
        if isinstance(batches, WatchedPass):
            batches.stop(0.0)
            if loader is not None:
                stop_loader_workers(loader, 0.0)
        del loader
        raise
    loader = owner()
    if loader is not None:
        loader._finished(token)
