"""A ``torch.utils.data.DataLoader`` that can stop after any batch and resume after it, on any rank.

The order of an epoch comes from :mod:`loaderfactory.components.order` (a function of
``(seed, epoch)``, the same on every rank), and the sampler can start at any position of it, so a
restored loader skips what was already delivered without loading it, with or without worker
processes (the sampler runs in the main process; workers only load the indices it hands out).
Worker base seeds are drawn from a generator seeded by ``(seed, epoch)`` too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset

from loaderfactory.components.order import Balance, RankOrder
from loaderfactory.components.order_state import ORDER_FIELD, check_order, shuffled_order
from loaderfactory.components.samplers import ReplayedSampler, ResumableSampler, epoch_seed
from loaderfactory.components.seeding import agreed_seed
from loaderfactory.components.state import check_matching, require_int, require_keys, require_state
from loaderfactory.components.workers.lifecycle import grace
from loaderfactory.components.workers.watched import WatchedPass, start_pass, stop_loader_workers
from loaderfactory.errors import ArgumentError, ResumeError
from loaderfactory.rules import raise_first
from loaderfactory.rules.torch_loader import sampling_problems


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
        self.seed = seed if seed is not None else agreed_seed(world_size)
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
                given = "shuffle" if shuffle else "sampler" if sampler is not None else "batch_sampler"
                raise ArgumentError(
                    given,
                    "an iterable dataset yields its own order: shuffle, sampler and batch_sampler "
                    "need a map-style dataset (len and [i])",
                )
            if world_size > 1:
                raise ArgumentError(
                    "distributed",
                    f"an iterable dataset cannot be split between {world_size} ranks by the loader; "
                    "split it by rank in the dataset itself",
                )
            super().__init__(
                dataset, batch_size=batch_size, drop_last=drop_last, generator=generator, **kwargs
            )
        self.items_per_batch = None if batch_sampler is not None else batch_size
        self._epoch = 0
        self._start = 0  # the position this pass went on from
        self._done = 0  # batches delivered before it
        self._delivered_now = 0  # batches this pass delivered
        self._active = False
        self._pending: tuple[int, int, int] | None = None  # (epoch, position, steps) of a loaded state
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
        raise_first(sampling_problems(batch_size, shuffle, sampler, batch_sampler, drop_last))
        if batch_sampler is not None:
            return ReplayedSampler(batch_sampler, self.seed)
        if sampler is not None:
            if batch_size is None:
                return ReplayedSampler(sampler, self.seed)
            return ReplayedSampler(BatchSampler(sampler, batch_size, drop_last), self.seed)
        length = len(dataset)  # type: ignore[arg-type]  # map-style datasets are sized
        order = RankOrder(length, self.seed, shuffle, self.rank, self.world_size, balance, dataset)
        return ResumableSampler(order, batch_size, drop_last)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches, as DataLoader does
        if self._pending is not None:
            epoch, position, done = self._pending
            self._pending = None
        elif self._active:
            epoch, position, done = self._epoch + 1, 0, 0  # the last pass was left unfinished: a new epoch
        else:
            epoch, position, done = self._epoch, 0, 0
        self._epoch, self._start, self._done, self._delivered_now = epoch, position, done, 0
        self._active = True
        self._token += 1
        if self._sampler is not None:
            self._sampler.epoch = epoch
            self._sampler.start, self._sampler.done = position, done
        self.generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch, salt=1))
        return _count(weakref.ref(self), self._token, start_pass(self, super().__iter__, "loader (torch)"))

    def __len__(self) -> int:
        """Batches of a whole epoch, also when restored mid-epoch: that pass yields only the rest.

        As torch's ``DataLoader`` and stateful loaders count it, and as PyTorch Lightning expects: it
        adds the batches it already took to what a restored pass yields. Counting only the rest would
        also go stale once a pass is abandoned, when the next pass is a whole epoch again.
        """
        if isinstance(self._sampler, ResumableSampler):
            # The epoch loaded, else the one in progress (or, after a finished pass, the next: 0, 0).
            _, position, done = self._pending if self._pending is not None else (0, self._start, self._done)
            return done + self._sampler.count(position)
        return super().__len__()

    def _delivered(self, token: int) -> None:
        if token == self._token:
            self._delivered_now += 1

    def _finished(self, token: int) -> None:
        if token == self._token:
            self._epoch += 1
            self._start = self._done = self._delivered_now = 0
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
        self._epoch, self._start, self._done, self._delivered_now = epoch, 0, 0, 0
        self._active = False

    @property
    def elastic(self) -> bool:
        """Whether a saved position means the same at any world size: the order is ours, not a sampler's."""
        return isinstance(self._sampler, ResumableSampler)

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
        }
        if not self.map_style:
            # Without a sampler the workers' interleaving decides the order.
            settings["num_workers"] = self.num_workers
        self._settings_cache = settings  # fixed at construction; state_dict() runs after every batch
        return settings

    def state_dict(self) -> dict[str, Any]:
        """The same on every rank: epoch, position in its order, batches delivered, seed and the
        settings a restored loader must share."""
        return self.state_from_snapshot(self.state_snapshot())

    def state_snapshot(self) -> tuple[int, int, int]:
        """``(epoch, position, steps)``: all of the state that changes per batch, cheap to take after
        each one (a stage reading ahead does); :meth:`state_from_snapshot` builds the state from it."""
        if self._pending is not None:
            return self._pending
        delivered = self._delivered_now
        position = self._sampler.position_after(delivered) if self._sampler is not None else delivered
        return self._epoch, position, self._done + delivered

    def state_from_snapshot(self, snapshot: tuple[int, int, int]) -> dict[str, Any]:
        """The :meth:`state_dict` this loader had when :meth:`state_snapshot` returned ``snapshot``."""
        if not self.map_style and self.num_workers > 0:
            raise ResumeError(
                "loader (torch): an iterable dataset read by worker processes keeps its position "
                "inside the workers; resume needs num_workers=0 or a map-style dataset"
            )
        epoch, position, steps = snapshot
        return {
            "epoch": epoch,
            "position": position,
            "steps": steps,
            "seed": self.seed,
            ORDER_FIELD: self._order(),
            **self._settings(),
        }

    def _order(self) -> str:
        """The order a position counts in (:mod:`~loaderfactory.components.order_state`)."""
        cached: str | None = self.__dict__.get("_order_cache")
        if cached is None:
            if isinstance(self._sampler, ResumableSampler):
                cached = shuffled_order(self._sampler.order.shuffle, self._sampler.order.dataset)
            else:
                cached = "sampler" if self._sampler is not None else "stream"
            self._order_cache = cached  # fixed at construction, as the settings are
        return cached

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at the saved epoch and position on the next ``iter()``.

        The state of any rank resumes every rank; one saved at another world size resumes too (the
        rest of the epoch is split between the ranks there are now), unless a sampler of yours gives
        the order.

        Raises:
            ResumeError: the state was saved under other settings (batch size, shuffle, ...), counted
                its position mid-epoch in another order (``order``), or a field is missing, of the
                wrong type, or out of range (a position past the epoch).
        """
        owner = "loader (torch)"
        state = require_state(owner, state)
        require_keys(owner, state, ("epoch", "position", "steps", "seed"))
        settings = dict(self._settings())
        if self.elastic:
            settings.pop("world_size")
            if getattr(self.dataset, "global_batch", None) is not None:
                settings.pop("batch_size")  # the dataset's global batch, split between other ranks
        check_matching(owner, state, settings)
        epoch = require_int(owner, state, "epoch")
        position = require_int(owner, state, "position", high=self._epoch_end())
        check_order(owner, state, self._order(), position)
        steps = require_int(owner, state, "steps")
        seed = require_int(owner, state, "seed", low=None)
        if self.seed_given and seed != self.seed:
            check_matching(owner, state, {"seed": self.seed})
        self.seed = seed
        if isinstance(self._sampler, ResumableSampler):
            self._sampler.order.seed = self.seed
        elif isinstance(self._sampler, ReplayedSampler):
            self._sampler.seed = self.seed
        self._pending = (epoch, position, steps)
        self._active = False

    def _epoch_end(self) -> int | None:
        """The largest position: the epoch's length in items, or in batches of a sampler of yours;
        ``None`` for an iterable dataset (its own slot keeps its position) or an unsized sampler."""
        if isinstance(self._sampler, ResumableSampler):
            return self._sampler.order.length
        if self._sampler is None:
            return None
        try:
            return len(self._sampler)
        except TypeError:  # a sampler of yours without len()
            return None

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        """For ``run.mode=plan``: (what runs, bytes of data held at most, what those bytes are)."""
        if self.num_workers == 0:  # collating holds a batch's items and the stacked batch at once
            return "the thread that reads it", 2 * batch_bytes, "a batch being collated"
        ahead = self.num_workers * (self.prefetch_factor or 2)
        return f"{self.num_workers} process worker(s)", ahead * batch_bytes, f"{ahead} batches in flight"


def _count(owner: weakref.ref[ResumableDataLoader], token: int, batches: Iterator[Any]) -> Iterator[Any]:
    # Holds the loader weakly so an abandoned pass never keeps it alive.
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
