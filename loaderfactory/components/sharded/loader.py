"""``ShardedDataLoader``: batches (or one batch per shard) from a map-style dataset, on any rank.

Rebuilt on torch from gluon-nlp's design, with what it lacks: a dead worker raises at once
instead of hanging the loop, a stuck one raises after ``timeout``, batches cross processes through
shared memory instead of pickled bytes, rollover state survives in ``state_dict()``, and the index
space is split between data-parallel ranks.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

from loaderfactory.components.sharded.sampling import (
    BALANCE,
    LAST_BATCH,
    Balance,
    EpochPlan,
    LastBatch,
    ShardPlanner,
    Step,
)
from loaderfactory.components.sharded.workers import (
    ProcessPool,
    ThreadPool,
    make_step,
    unpack_error,
    worker_seed,
)

Pool = ProcessPool | ThreadPool


class ShardedDataLoader:
    """Load batches from a map-style dataset; a batch sampler may ask for several shards per step.

    Each step is one batch, or a list of ``num_shards`` batches (one per device, say) when
    ``num_shards > 1`` or when ``batch_sampler`` yields lists of index lists. Across
    data-parallel processes, pass ``rank`` and ``world_size``: ranks get disjoint parts of one
    seeded per-epoch order and yield the same number of steps (``balance``).

    Costs ``num_workers`` processes (or threads) and up to ``prefetch`` steps in flight; process
    workers hand tensors over in shared memory.

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
        worker_type: ``process`` (the dataset runs in forked processes, batches come back in
            shared memory) or ``thread`` (workers share the dataset; good when it releases the GIL).
        pin_memory: pin batches for fast host-to-device copies when an accelerator is present;
            does nothing on a CPU-only machine.
        prefetch: steps in flight at most; default 2 per worker.
        num_shards: batches per step.
        seed: seeds the shuffle (same on every rank) and, derived per worker, the workers' torch,
            numpy and ``random`` generators. ``None``: random when alone, 0 across ranks.
        rank: this process's rank among ``world_size`` data-parallel processes.
        world_size: data-parallel processes; give both or neither.
        persistent_workers: keep the workers between complete epochs.
        timeout: seconds to wait for a worker's batch before raising
            :class:`~loaderfactory.errors.StallError`; ``None`` waits forever (a dead worker
            still raises :class:`~loaderfactory.errors.WorkerError` at once).
        balance: how ranks get equal steps: ``pad`` (wrap the order around, a few items seen
            twice), ``drop`` (skip the last few) or ``uneven`` (never duplicate or skip; the last
            rank may have one step fewer, so wrap training in ``torch.distributed.algorithms.Join``).
        multiprocessing_context: ``fork`` (default where available), ``spawn`` or ``forkserver``.
        batchify_fn: the seed's name for ``collate``.
        thread_pool: the seed's switch: ``True`` means ``worker_type="thread"``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = None,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        last_batch: LastBatch = "keep",
        batch_sampler: Iterable[Step] | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        worker_type: str = "process",
        pin_memory: bool = False,
        prefetch: int | None = None,
        num_shards: int = 1,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        persistent_workers: bool = False,
        timeout: float | None = None,
        *,
        balance: Balance = "pad",
        multiprocessing_context: str | None = None,
        batchify_fn: Callable[[list[Any]], Any] | None = None,
        thread_pool: bool | None = None,
        name: str = "ShardedDataLoader",
    ) -> None:
        if batchify_fn is not None:
            if collate is not None:
                raise ValueError("collate and batchify_fn name the same argument; give one")
            collate = batchify_fn
        if thread_pool is not None:
            # worker_type defaults to "process", so only an explicit "thread" contradicts it.
            if worker_type == "thread" and not thread_pool:
                raise ValueError("worker_type='thread' and thread_pool=False contradict each other; give one")
            worker_type = "thread" if thread_pool else "process"
        _check_sampling(batch_size, shuffle, sampler, last_batch, batch_sampler, num_shards)
        if worker_type not in ("process", "thread"):
            raise ValueError(f"worker_type must be 'process' or 'thread', got {worker_type!r}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if prefetch is not None and prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 or None, got {timeout}")
        if balance not in BALANCE:
            raise ValueError(f"balance must be one of {', '.join(BALANCE)}, got {balance!r}")
        if (rank is None) != (world_size is None):
            raise ValueError("give rank and world_size together (or neither, for a single process)")
        rank, world_size = (0, 1) if rank is None or world_size is None else (rank, world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size) and world_size >= 1, got {rank} of {world_size}"
            )
        if seed is None:
            # Every rank must shuffle alike, and no seed can be agreed on without one: use 0 there.
            seed = 0 if world_size > 1 else int(torch.randint(0, 2**62, ()).item())
        length = None
        if sampler is None and batch_sampler is None:
            if not hasattr(dataset, "__len__"):
                raise ValueError("the dataset has no len(); give a sampler or a batch_sampler")
            length = len(dataset)
        self.dataset = dataset
        self.collate: Callable[[list[Any]], Any] = collate if collate is not None else default_collate
        self.num_workers = num_workers
        self.worker_type = worker_type
        self.pin_memory = pin_memory
        self.prefetch = max(1, 2 * num_workers if prefetch is None else prefetch)
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.persistent_workers = persistent_workers
        self.timeout = timeout
        self.multiprocessing_context = multiprocessing_context
        self.name = name
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
        )
        self._epoch = 0
        self._carry: list[int] = []
        self._resume_step = 0
        # Where an unfinished pass stopped: (epoch, steps yielded, rollover it started with). Kept
        # after an early break, so state_dict() taken then resumes after the last batch delivered.
        self._stopped_at: tuple[int, int, Sequence[int]] | None = None
        self._generation = 0
        self._pool: Pool | None = None
        self._pass: weakref.ref[_Pass] | None = None
        self._pin = pin_memory and torch.accelerator.is_available()

    # -- epochs -----------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next pass loads (each pass advances it unless :meth:`set_epoch` is called)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Load ``epoch`` next: its shuffle order, identical on every rank that sets the same epoch."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        self._close_pass()
        self._stopped_at = None
        plan = self.planner.plan(self._epoch, self._carry)
        self._epoch += 1
        start, self._resume_step = self._resume_step, 0
        current = _Pass(self, plan, start, self._take_pool())
        self._pass = weakref.ref(current)
        return current

    def __len__(self) -> int:
        current = self._current_pass()
        if current is not None:
            return current.total
        return self.planner.count(len(self._carry)) - self._resume_step

    def _finished(self, plan: EpochPlan) -> None:
        self._carry = list(plan.carry_out)
        self._stopped_at = None

    # -- workers ----------------------------------------------------------------------------------

    def _take_pool(self) -> Pool | None:
        if self.num_workers == 0:
            return None
        if self._pool is not None and not self._pool.closed:
            return self._pool
        seeds = [worker_seed(self.seed, self.rank, i, self._generation) for i in range(self.num_workers)]
        self._generation += 1
        pool: Pool
        if self.worker_type == "thread":
            pool = ThreadPool(self.dataset, self.collate, seeds, self.rank, self.prefetch + 1, self.name)
        else:
            pool = ProcessPool(
                self.dataset, self.collate, seeds, self.rank, self.multiprocessing_context, self.name
            )
        self._pool = pool if self.persistent_workers else None
        return pool

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the live worker processes (empty for threads or no workers)."""
        current = self._current_pass()
        pool = current.pool if current is not None else self._pool
        return list(pool.pids) if isinstance(pool, ProcessPool) and not pool.closed else []

    def _current_pass(self) -> _Pass | None:
        current = self._pass() if self._pass is not None else None
        return current if current is not None and not current.done else None

    def _close_pass(self) -> None:
        current = self._pass() if self._pass is not None else None
        if current is not None:
            current.close()
        self._pass = None

    def close(self) -> None:
        """Stop the current pass and every worker; safe to call twice."""
        self._close_pass()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> ShardedDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: the epoch, steps yielded of it, and the rollover it started with."""
        current = self._current_pass()
        if current is not None:
            return {
                "epoch": current.plan.epoch,
                "step": current.position,
                "carry": list(current.plan.carry_in),
            }
        if self._stopped_at is not None:
            epoch, step, carry = self._stopped_at
            return {"epoch": epoch, "step": step, "carry": list(carry)}
        return {"epoch": self._epoch, "step": self._resume_step, "carry": list(self._carry)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next pass yields exactly the rest of that epoch."""
        self._close_pass()
        self._stopped_at = None
        self._epoch = int(state["epoch"])
        self._resume_step = int(state.get("step", 0))
        self._carry = [int(i) for i in state.get("carry", [])]

    def telemetry(self) -> dict[str, Any]:
        return {
            "worker_type": self.worker_type if self.num_workers else "none",
            "num_workers": self.num_workers,
            "prefetch": self.prefetch if self.num_workers else 0,
            "rank": self.rank,
            "world_size": self.world_size,
            "epoch": self._epoch,
            "rollover": len(self._carry),
        }


class _Pass:
    """One pass over an epoch plan: submits steps to the pool, yields results in order."""

    def __init__(self, owner: ShardedDataLoader, plan: EpochPlan, start: int, pool: Pool | None) -> None:
        self.owner = owner
        self.plan = plan
        self.pool = pool
        self.position = start
        self.total = len(plan.steps) - start
        self.done = False
        self._sent = start
        self._id = id(self)
        # An abandoned pass (early ``break``, ``close()``, garbage collection) stops its workers;
        # persistent workers survive only complete epochs.
        self._finalizer = weakref.finalize(self, pool.close) if pool is not None else None
        self._fill()

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        if self.position >= len(self.plan.steps):
            self._complete()
            raise StopIteration
        step = self.plan.steps[self.position]
        owner = self.owner
        if self.pool is None:
            try:
                batch = make_step(owner.dataset, owner.collate, step)
            except BaseException:
                self.close()
                raise
        else:
            batch = self._receive()
        self.position += 1
        owner._stopped_at = (self.plan.epoch, self.position, self.plan.carry_in)
        if owner._pin:
            batch = _pin(batch)
        return batch

    def _receive(self) -> Any:
        assert self.pool is not None  # only called with a pool
        worker = self.position % self.pool.num_workers
        try:
            while True:
                key, ok, payload = self.pool.receive(worker, self.owner.timeout)
                if key == (self._id, self.position):
                    break
            self._fill(extra=1)
        except BaseException:
            self.close()
            raise
        if not ok:
            self.close()
            if isinstance(self.pool, ThreadPool):
                raise payload
            raise unpack_error(payload, f"{self.owner.name} worker {worker} (pid {self.pool.pids[worker]})")
        return payload

    def _fill(self, extra: int = 0) -> None:
        if self.pool is None:
            return
        limit = min(len(self.plan.steps), self.position + extra + self.owner.prefetch)
        while self._sent < limit:
            self.pool.submit(
                self._sent % self.pool.num_workers, (self._id, self._sent), self.plan.steps[self._sent]
            )
            self._sent += 1

    def _complete(self) -> None:
        self.done = True
        self.owner._finished(self.plan)
        if self._finalizer is not None:
            if self.owner.persistent_workers:
                self._finalizer.detach()
            else:
                self._finalizer()

    def close(self) -> None:
        """Stop this pass (and its workers, unless the epoch completed with persistent workers)."""
        self.done = True
        if self._finalizer is not None:
            self._finalizer()


def _pin(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, Mapping):
        return type(batch)({k: _pin(v) for k, v in batch.items()})  # type: ignore[call-arg]  # dict-like types take a mapping
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_pin(v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(_pin(v) for v in batch)
    return batch


def _check_sampling(
    batch_size: int | None,
    shuffle: bool,
    sampler: object,
    last_batch: str,
    batch_sampler: object,
    num_shards: int,
) -> None:
    """The seed's argument rules, as ``ValueError``s."""
    if last_batch not in LAST_BATCH:
        raise ValueError(f"last_batch must be one of {', '.join(LAST_BATCH)}, got {last_batch!r}")
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if batch_sampler is not None:
        given = [
            name
            for name, is_set in (
                ("batch_size", batch_size is not None),
                ("shuffle", shuffle),
                ("sampler", sampler is not None),
                ("last_batch", last_batch != "keep"),
                ("num_shards", num_shards != 1),
            )
            if is_set
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} must not be given with batch_sampler: the batch sampler decides "
                "batches and shards itself"
            )
        return
    if batch_size is None:
        raise ValueError("batch_size must be given unless batch_sampler is")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if sampler is not None and shuffle:
        raise ValueError("shuffle must not be given with sampler: the sampler decides the order")
