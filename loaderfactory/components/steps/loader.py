"""``ShardedDataLoader``: batches (or one batch per shard) from a map-style dataset, on any rank.

Rebuilt on torch from gluon-nlp's design, with what it lacks: a dead worker raises at once
instead of hanging the loop, a stuck one raises after ``timeout``, batches cross processes through
shared memory instead of pickled bytes, rollover state survives in ``state_dict()``, and the index
space is split between data-parallel ranks. gluon-nlp's argument names are in
:mod:`loaderfactory.compat`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import torch

from loaderfactory.components.data.stacked import default_collate
from loaderfactory.components.order_state import ORDER_FIELD, check_order, shuffled_order
from loaderfactory.components.seeding import agreed_seed
from loaderfactory.components.state import (
    check_matching,
    require_int,
    require_keys,
    require_state,
)
from loaderfactory.components.steps.arguments import check_sampling, check_workers, place
from loaderfactory.components.steps.passes import LoadStep, Pass, Pool
from loaderfactory.components.steps.position import Position, read_position
from loaderfactory.components.steps.sampling import (
    Balance,
    EpochPlan,
    LastBatch,
    ShardPlanner,
    Step,
)
from loaderfactory.components.workers.current_pass import CurrentPass
from loaderfactory.components.workers.info import worker_seed
from loaderfactory.components.workers.lifecycle import stopping_together
from loaderfactory.components.workers.processes import ProcessWorkers
from loaderfactory.components.workers.threads import ThreadWorkers
from loaderfactory.errors import ArgumentError

WorkerType = Literal["process", "thread"]


class ShardedDataLoader:
    """Load batches from a map-style dataset; a batch sampler may ask for several shards per step.

    Each step is one batch, or a list of ``num_shards`` batches (one per device, say) when
    ``num_shards > 1`` or when ``batch_sampler`` yields lists of index lists. Across
    data-parallel processes, pass ``rank`` and ``world_size``: ranks get disjoint parts of one
    seeded per-epoch order and yield the same number of steps (``balance``).

    Costs ``num_workers`` processes (or threads) and up to ``prefetch`` steps in flight; process
    workers are torch's ``DataLoader`` workers and hand tensors over in shared memory.

    Args:
        dataset: a map-style dataset (``__getitem__``; ``__len__`` unless a sampler is given).
        batch_size: indices per batch; required unless ``batch_sampler`` is given.
        shuffle: a new order every epoch, seeded by ``(seed, epoch)``; excludes ``sampler``.
        sampler: an iterable of indices giving the order; its ``set_epoch`` is called each epoch.
        last_batch: the rest that fills no whole step: ``keep`` (yield it short), ``discard`` or
            ``rollover`` (carry it into the next epoch's first batch).
        batch_sampler: an iterable of steps: index lists, or lists of index lists (one batch per
            inner list). Excludes ``batch_size``, ``shuffle``, ``sampler``, ``last_batch`` and
            ``num_shards``.
        collate: merges a list of items into a batch (``torch``'s ``default_collate``).
        num_workers: background workers; 0 loads in the consumer's thread.
        worker_type: ``process`` (the dataset runs in worker processes, batches come back in
            shared memory) or ``thread`` (workers share the dataset; good when it releases the GIL).
        pin_memory: pin batches for fast host-to-device copies when an accelerator is present;
            does nothing on a CPU-only machine.
        prefetch: steps the workers run ahead of the consumer at most (process workers: rounded up
            to a multiple of ``num_workers``); default 2 per worker.
        num_shards: batches per step.
        seed: seeds the shuffle (same on every rank) and, derived per rank and worker, the workers'
            torch, numpy and ``random`` generators. ``None``: one that every rank agrees on (see
            :mod:`~loaderfactory.components.seeding`), recorded in the state.
        rank: this process's rank among ``world_size`` data-parallel processes.
        world_size: data-parallel processes; give both or neither.
        balance: how ranks get equal steps: ``pad`` (wrap the order around, a few items seen
            twice), ``drop`` (skip the last few) or ``uneven`` (never duplicate or skip; the last
            rank may have one step fewer, so wrap training in ``torch.distributed.algorithms.Join``).
        persistent_workers: keep the workers between complete epochs.
        timeout: seconds to wait for a worker's batch before raising
            :class:`~loaderfactory.errors.StallError`; ``None`` waits forever (a dead worker
            still raises :class:`~loaderfactory.errors.WorkerError` at once).
        multiprocessing_context: ``fork`` (default where available), ``spawn`` or ``forkserver``.
        name: names the workers and opens their errors.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = None,
        *,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        last_batch: LastBatch = "keep",
        batch_sampler: Iterable[Step] | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        worker_type: WorkerType = "process",
        pin_memory: bool = False,
        prefetch: int | None = None,
        num_shards: int = 1,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        balance: Balance = "pad",
        persistent_workers: bool = False,
        timeout: float | None = None,
        multiprocessing_context: str | None = None,
        name: str = "ShardedDataLoader",
    ) -> None:
        check_sampling(batch_size, shuffle, sampler, last_batch, batch_sampler, num_shards, balance)
        check_workers(worker_type, num_workers, prefetch, timeout)
        rank, world_size = place(rank, world_size)
        self.seed_given = seed is not None
        seed = agreed_seed(world_size) if seed is None else seed
        length = _length(dataset) if sampler is None and batch_sampler is None else None
        self.dataset = dataset
        self.collate: Callable[[list[Any]], Any] = collate if collate is not None else default_collate
        self.load = LoadStep(dataset, self.collate)
        self.num_workers, self.worker_type, self.pin_memory = num_workers, worker_type, pin_memory
        self.prefetch = max(1, 2 * num_workers if prefetch is None else prefetch)
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.persistent_workers = persistent_workers
        self.timeout, self.multiprocessing_context, self.name = timeout, multiprocessing_context, name
        self.planner = ShardPlanner(
            length,
            batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            last_batch=last_batch,
            num_shards=num_shards,
            seed=seed,
            rank=rank,
            world_size=world_size,
            balance=balance,
            dataset=dataset,
        )
        self._position = Position()
        self._generation = 0
        self._pool: Pool | None = None
        self._pass: CurrentPass[Pass] = CurrentPass()
        self._pin = pin_memory and torch.accelerator.is_available()

    # -- epochs -----------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next pass loads (each pass advances it unless :meth:`set_epoch` is called)."""
        return self._position.epoch

    def set_epoch(self, epoch: int) -> None:
        """Load ``epoch`` next: its shuffle order, identical on every rank that sets the same epoch."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._position.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        return self._pass.start(self._next_pass)

    def _next_pass(self) -> Pass:
        plan = self._position.next_plan(self.planner)
        return Pass(self, plan, 0, self._take_pool(), pin=self._pin)

    def __len__(self) -> int:
        current = self._current_pass()
        if current is not None:
            return current.plan.done + len(current.plan.steps)
        at = self._position  # the whole epoch, also when resumed
        return at.done + self.planner.count(len(at.carry), at.start)

    def _delivered(self, plan: EpochPlan, position: int) -> None:
        self._position.stopped_at = (plan, position)

    def _finished(self, plan: EpochPlan) -> None:
        self._position.finished(plan)

    # -- workers ----------------------------------------------------------------------------------

    def _take_pool(self) -> Pool | None:
        if self.num_workers == 0:
            return None
        if self._pool is not None and not self._pool.closed:
            return self._pool
        pool = self._start_pool(self._generation)
        self._generation += 1
        self._pool = pool if self.persistent_workers else None
        return pool

    def _start_pool(self, generation: int) -> Pool:
        """A fresh pool; ``generation`` counts the pools before it, so each is seeded anew."""
        if self.worker_type == "thread":
            seeds = [worker_seed(self.seed, self.rank, i, generation) for i in range(self.num_workers)]
            # The window counts the step the consumer is about to get, as well as those ahead of it.
            window = self.prefetch + 1
            return ThreadWorkers(
                self.load, seeds, window=window, timeout=self.timeout, rank=self.rank, name=self.name
            )
        return ProcessWorkers(
            self.load,
            self.num_workers,
            prefetch=self.prefetch,
            # One seed per rank and pool; torch derives each worker's from it.
            seed=worker_seed(self.seed, self.rank, 0, generation),
            timeout=self.timeout,
            persistent_workers=self.persistent_workers,
            pin_memory=self.pin_memory,
            multiprocessing_context=self.multiprocessing_context,
            rank=self.rank,
            name=self.name,
        )

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the live worker processes (empty for threads or no workers)."""
        current = self._current_pass()
        pool = current.pool if current is not None else self._pool
        return pool.pids if pool is not None and not pool.closed else []

    def _current_pass(self) -> Pass | None:
        current = self._pass.get()
        return current if current is not None and not current.done else None

    def close(self) -> None:
        """Stop the current pass and every worker, within one bounded grace; safe to call twice."""
        with stopping_together():
            self._pass.close()
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> ShardedDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, the workers are not waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()

    # -- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands, the same on every rank: the epoch, the position in its pool and the
        steps delivered, the rollover it started with, the seed and the batching."""
        current = self._current_pass()
        running = (current.plan, current.position) if current is not None else None
        return {
            **self._position.state(running),
            "seed": self.seed,
            ORDER_FIELD: self._order(),
            **self._layout(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` of any rank, at any world size: the next pass yields this
        rank's part of the rest of that epoch (exactly the rest of its own when the world size is
        the same).

        Raises:
            ResumeError: the state was saved with another batch size, shard count or seed (or world
                size, with a batch sampler), or a field is missing, of the wrong type or out of range
                (a position past the epoch, an index past the dataset).
        """
        owner = "loader (sharded)"
        state = require_state(owner, state)
        require_keys(owner, state, ("epoch", "position", "steps", "carry", "seed"))
        layout = self._layout()
        if self.planner.elastic:
            layout.pop("world_size")
        check_matching(owner, state, layout)
        position = read_position(owner, state, self.planner, self._last_index())
        check_order(owner, state, self._order(), position.start)
        seed = require_int(owner, state, "seed", low=None)
        if self.seed_given:
            check_matching(owner, state, {"seed": self.seed})
        self._pass.close()
        self.seed = self.planner.order.seed = seed
        self._position = position

    def _order(self) -> str:
        """The order a position counts in (:mod:`~loaderfactory.components.order_state`)."""
        cached: str | None = self.__dict__.get("_order_cache")
        if cached is None:
            custom = self.planner.sampler is not None or self.planner.batch_sampler is not None
            order = self.planner.order
            cached = "sampler" if custom else shuffled_order(order.shuffle, order.dataset)
            self._order_cache = cached
        return cached

    def _layout(self) -> dict[str, Any]:
        """The batching that decides what a position means; a state saved under other values is refused."""
        return {
            "world_size": self.world_size,
            "batch_size": self.planner.batch_size,
            "num_shards": self.planner.num_shards,
        }

    def _last_index(self) -> int | None:
        """The largest dataset index, where the dataset is sized."""
        try:
            return len(self.dataset) - 1
        except TypeError:  # a dataset without len(), read through a sampler
            return None

    def telemetry(self) -> dict[str, Any]:
        return {
            "worker_type": self.worker_type if self.num_workers else "none",
            "num_workers": self.num_workers,
            "prefetch": self.prefetch if self.num_workers else 0,
            "rank": self.rank,
            "world_size": self.world_size,
            "epoch": self._position.epoch,
            "rollover": len(self._position.carry),
        }

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        """For ``run.mode=plan``: (what runs, bytes of data held at most, what those bytes are)."""
        if self.num_workers == 0:  # collating holds a step's items and the stacked batches at once
            return "the thread that reads it", 2 * batch_bytes, "a batch being collated"
        runs = f"{self.num_workers} {self.worker_type} worker(s)"
        return runs, self.prefetch * batch_bytes, f"{self.prefetch} batches in flight"


def _length(dataset: Any) -> int:
    """``len(dataset)``: the order needs it unless a sampler or batch sampler gives the indices."""
    if not hasattr(dataset, "__len__"):
        raise ArgumentError("dataset", "the dataset has no len(); give a sampler or a batch_sampler")
    return len(dataset)
