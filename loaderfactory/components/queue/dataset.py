"""``QueueDataset``: batches drawn from items held in memory, refilled by background workers.

Turns slow storage into fast training: workers load items into a bounded in-memory queue, and each
batch is drawn from whatever the queue holds, the least drawn items first (ties at random), so every
item is drawn about equally often. Improves on torchvtk's ``TorchQueueDataset`` (whose argument
names :class:`loaderfactory.compat.TorchQueueDataset` keeps): draws are balanced, not uniform,
the RAM budget holds by bytes for every item actually loaded (not an estimate from the first file),
``wait_fill=True`` waits for a full queue and raises on timeout, an epoch is ``epoch_size``
batches, and a failing or killed worker stops the queue with an error instead of leaving it to
resample stale items.
"""

from __future__ import annotations

import random
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from loaderfactory.components.data.collate import DictCollate
from loaderfactory.components.queue.arguments import MB, as_transform, check_arguments, dataset_length, sizes
from loaderfactory.components.queue.dataloader import queue_dataloader
from loaderfactory.components.queue.filler import in_flight
from loaderfactory.components.queue.run import QueueRun
from loaderfactory.components.queue.store import Mode, megabytes
from loaderfactory.components.queue.telemetry import QueueTelemetry
from loaderfactory.components.state import require_int, require_state
from loaderfactory.components.workers.lifecycle import stopping_together
from loaderfactory.errors import StallError


class QueueDataset(IterableDataset[Any]):
    """Batches of ``batch_size`` items drawn from a queue of loaded items in RAM, least drawn first.

    Use it when loading an item is much slower than a training step (network disks, heavy
    decoding) and seeing an item several times per pass is acceptable. In mode ``"onsample"`` each
    draw from a full queue lets the oldest item out and the next draw waits for its replacement
    (gentle on storage, reproducible with a seed); in mode ``"always"`` the workers replace the
    oldest items as fast as they load and draws never wait once the queue has filled. Costs
    ``num_workers`` threads or processes, one filler thread and up to ``ram_budget`` of memory,
    plus an item in flight per worker (two per process in mode ``"always"``). Workers start at the first
    iteration; breaking out early, ``close()`` or garbage collection stops them (the next starts afresh).

    Draws are balanced: each takes the held items whose dataset index has been drawn least often
    so far (since construction, or as restored by :meth:`load_state_dict`), ties broken at random,
    so an item reloaded later catches up with the others. Over 800 draws from 64 items in mode
    ``always`` the draws per item vary about a fifth as much as with uniform draws
    (``benchmarks/bench_queue_balance.py``), at the same speed: O(log n) per drawn item. Only
    items that are held get drawn: with draws far faster than loads (mode ``always``), the items
    loaded last stay behind.

    Args:
        dataset: a map-style dataset (``len`` and ``[i]``) of dict items.
        epoch_size: batches per epoch (``len()``).
        mode: ``"onsample"`` or ``"always"``.
        num_workers: loading workers, at least 1.
        worker_type: ``"thread"`` (loading that releases the GIL: I/O, decoding in C) or
            ``"process"`` (items arrive in shared memory).
        capacity: most items held; ``None`` derives it from the budget and ``avg_item_size``
            (the byte budget applies either way). Never more than ``len(dataset)``.
        ram_budget: a float in (0, 1] (fraction of available memory) or an int (bytes). The items
            held never exceed it in bytes; an item larger than all of it raises :class:`LimitError`.
        avg_item_size: an item's size in MB, or an example item (tensor or dict) to measure;
            ``None`` measures the items as they load.
        wait_fill: ``True`` waits for a full queue before the first draw, an int for that many
            items, ``False`` lets draws start as soon as one item is in.
        wait_fill_timeout: seconds ``wait_fill`` may take; then :class:`StallError` (or a warning).
        sample_transforms: applied to each drawn item: ``f(item, generator)`` or ``f(item)``.
        batch_transforms: applied to each collated batch.
        batch_size: items per batch.
        collate: list of items → batch; default :class:`DictCollate`.
        log_sampling: record the queue's fill level and the drawn items' age at every draw.
        seed: seeds the index order, the draws and the transforms; ``None`` draws a random seed.
        preprocess: applied to each item in the worker, before it enters the queue.
        on_fill_timeout: ``"raise"`` or ``"warn"`` when ``wait_fill`` times out.
        timeout: seconds a draw may wait for the workers before :class:`StallError`; ``None``: forever.
        multiprocessing_context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` for process workers.
    """

    def __init__(
        self,
        dataset: Any,
        epoch_size: int = 1000,
        mode: Mode = "onsample",
        num_workers: int = 1,
        worker_type: Literal["thread", "process"] = "thread",
        capacity: int | None = None,
        ram_budget: float | int = 0.5,
        avg_item_size: float | torch.Tensor | Mapping[str, Any] | None = None,
        wait_fill: bool | int = True,
        wait_fill_timeout: float | None = 60.0,
        sample_transforms: Callable[..., Any] | None = None,
        batch_transforms: Callable[..., Any] | None = None,
        batch_size: int = 1,
        collate: Callable[[list[Any]], Any] | None = None,
        log_sampling: bool = False,
        seed: int | None = None,
        *,
        preprocess: Callable[[Any], Any] | None = None,
        on_fill_timeout: Literal["raise", "warn"] = "raise",
        timeout: float | None = None,
        multiprocessing_context: str | None = None,
    ) -> None:
        self.dataset = dataset
        self.length = dataset_length(dataset)
        check_arguments(
            {"epoch_size": epoch_size, "num_workers": num_workers, "batch_size": batch_size},
            {"mode": mode, "worker_type": worker_type, "on_fill_timeout": on_fill_timeout},
            capacity,
            wait_fill,
        )
        self.epoch_size = epoch_size
        self.mode: Mode = mode
        self.num_workers = num_workers
        self.worker_type: Literal["thread", "process"] = worker_type
        self.batch_size = batch_size
        self.wait_fill = wait_fill
        self.wait_fill_timeout = wait_fill_timeout
        self.on_fill_timeout = on_fill_timeout
        self.timeout, self.multiprocessing_context = timeout, multiprocessing_context
        self.sample_transforms = as_transform(sample_transforms)
        self.batch_transforms = as_transform(batch_transforms)
        self.preprocess = preprocess
        self.collate: Callable[[list[Any]], Any] = collate or DictCollate()
        self.log_sampling = log_sampling
        self.seed: int = seed if seed is not None else random.SystemRandom().randrange(2**62)
        self.ram_budget = ram_budget
        self.budget, self.item_size, self.capacity = sizes(
            ram_budget, avg_item_size, capacity, self.length, self
        )
        self.telemetry_log = QueueTelemetry(self.length, self.log_sampling)
        # Resume: batches drawn in the current epoch, the batch the current pass started at, and
        # the one the next pass starts at after load_state_dict().
        self._in_epoch = 0
        self._start = 0
        self._resume_at: int | None = None
        self._lock = threading.Lock()
        self._run: QueueRun | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the workers now (the first iteration does it otherwise)."""
        self._started()

    def _started(self) -> QueueRun:
        with self._lock:
            if self._run is None:
                run = QueueRun(self)
                self._run = run
                self._finalizer = weakref.finalize(self, run.stop)
                fresh = True
            else:
                run, fresh = self._run, False
        if fresh and self.wait_fill is not False:
            self.wait_fill_queue(
                None if self.wait_fill is True else int(self.wait_fill), self.wait_fill_timeout
            )
        return run

    def close(self) -> None:
        """Stop every worker and drop the queue (freeing its shared memory); safe to call twice.

        Bounded: worker processes get one grace for all of them and are then terminated; a worker
        thread stuck in ``dataset[i]`` is left to finish as a daemon, with a ``RuntimeWarning``.
        """
        with self._lock:
            finalizer, self._finalizer, self._run = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> QueueDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        # With an exception on its way out, the workers are not waited for: the error comes first.
        with stopping_together(wait=exc[0] is None):
            self.close()

    # -- filling ------------------------------------------------------------------------------
    @property
    def qsize(self) -> int:
        """Items in the queue now."""
        run = self._run
        return len(run.store) if run is not None else 0

    def wait_fill_queue(self, fill_atleast: int | None = None, timeout: float | None = 60.0) -> int:
        """Wait until the queue is full (or holds ``fill_atleast`` items); returns the items held.

        Starts the workers if needed. On timeout raises :class:`StallError` (a ``TimeoutError``),
        or warns when ``on_fill_timeout="warn"``; a worker's failure is raised at once.
        """
        run = self._run or self._started()
        target = None if fill_atleast is None else min(fill_atleast, self.capacity)
        start = time.monotonic()
        if not run.store.wait_for(target, timeout):
            if self._run is None:
                raise RuntimeError("QueueDataset: closed while waiting for it to fill")
            wanted = "full" if target is None else f"{target} items"
            message = (
                f"QueueDataset: wait_fill timed out after {timeout} s with {len(run.store)} items "
                f"({megabytes(run.store.nbytes)}) in the queue, waiting for {wanted}; the workers are too "
                "slow or stuck: raise wait_fill_timeout, lower wait_fill, or set on_fill_timeout='warn'"
            )
            if self.on_fill_timeout == "warn":
                warnings.warn(message, RuntimeWarning, stacklevel=2)
            else:
                raise StallError(message)
        self.telemetry_log.fill_wait_s = time.monotonic() - start
        return len(run.store)

    # -- drawing ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches in an epoch, ``epoch_size``; a resumed pass draws only the rest of the saved one."""
        return self.epoch_size

    def __iter__(self) -> Iterator[Any]:
        start, self._resume_at = self._resume_at or 0, None
        self._start = self._in_epoch = start
        return self._pass(start)

    def _pass(self, start: int) -> Iterator[Any]:
        try:
            for _ in range(start, self.epoch_size):
                batch = self.draw()
                self._in_epoch += 1
                yield batch
            self._start = self._in_epoch = 0
        except GeneratorExit:
            self.close()  # an early break ends the pass: stop the workers, as a DataLoader does
            raise
        except BaseException:
            # An error ends it too, and reaches the loop first: the workers are not waited for.
            with stopping_together(wait=False):
                self.close()
            raise

    def draw(self) -> Any:
        """One batch: the ``batch_size`` least drawn held items (ties at random), transformed and collated."""
        run = self._run or self._started()
        entries, held, held_bytes = run.store.sample(self.batch_size, self.timeout, "QueueDataset")
        self.telemetry_log.record_draw(entries, held, held_bytes, time.monotonic())
        items = [entry.item for entry in entries]
        if self.sample_transforms is not None:
            items = [self.sample_transforms(item, run.generator) for item in items]
        batch = self.collate(items)
        if self.batch_transforms is not None:
            batch = self.batch_transforms(batch, run.generator)
        return batch

    def batch_generator(self) -> Iterator[Any]:
        """Batches without end (torchvtk's name); ``iter(queue)`` gives one epoch."""
        while True:
            yield self.draw()

    def get_dataloader(self, **kwargs: Any) -> DataLoader[Any]:
        """A ``DataLoader`` over the queue's batches (``batch_size=None``: the queue batches itself).

        ``batch_size``, ``collate_fn``, ``shuffle``, samplers and ``num_workers > 0`` are refused:
        set batching in the queue; its workers already load in the background, and DataLoader
        workers would each copy the whole queue.
        """
        return queue_dataloader(self, **kwargs)

    # -- telemetry ----------------------------------------------------------------------------
    @property
    def sampling_counts(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """How often each dataset index has been drawn (since construction)."""
        return self.telemetry_log.counts.copy()

    def telemetry(self) -> dict[str, Any]:
        """Sampling uniformity, fill level, item age, loads and memory, for the run report."""
        run = self._run
        report = self.telemetry_log.summary()
        report.update(
            mode=self.mode,
            workers=f"{self.num_workers} {self.worker_type}",
            capacity=self.capacity,
            budget_mb=round(self.budget / MB, 3),
        )
        if run is not None:
            report.update(qsize=len(run.store), held_mb=round(run.store.nbytes / MB, 3))
        return report

    def fill_level(self) -> dict[str, float] | None:
        """Items and bytes held now, against ``capacity`` and the RAM budget; ``None`` before the
        queue starts. Cheap and safe from another thread: the report samples it during a run."""
        run = self._run
        if run is None:
            return None
        return {
            "items": len(run.store),
            "bytes": run.store.nbytes,
            "capacity": self.capacity,
            "budget_bytes": self.budget,
        }

    def stage_times(self) -> dict[str, float]:
        """Seconds the queue's stages took, for the report's figure: the wait for its first fill."""
        fill = self.telemetry_log.fill_wait_s
        return {} if fill is None else {"queue: first fill": fill}

    def footprint(self, item_bytes: int, batch_bytes: int) -> tuple[str, int, str]:
        """For ``run.mode=plan``: (what runs, bytes of data held at most, what those bytes are)."""
        held = min(self.capacity * item_bytes, self.budget) if item_bytes else self.budget
        outside = in_flight(self.mode, self.worker_type) * self.num_workers
        runs = f"{self.num_workers} {self.worker_type} worker(s) and 1 filler thread"
        what = f"{self.capacity} items (budget {self.budget} B) + {outside} in flight"
        return runs, held + outside * item_bytes, what

    def state_dict(self) -> dict[str, Any]:
        """What survives a restart: the sampling counts (the queue's items are reloaded), which the
        draws keep balancing, and the batches drawn in the current epoch (``in_epoch``)."""
        in_epoch = self._resume_at if self._resume_at is not None else self._in_epoch
        return {**self.telemetry_log.state_dict(), "in_epoch": in_epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the sampling counts now; the next pass draws the rest of the saved epoch.

        A state saved before ``in_epoch`` was recorded resumes at the start of an epoch.

        Raises:
            ResumeError: a field is missing, of the wrong type or out of range (``in_epoch`` past
                ``epoch_size``, counts for a dataset of another length).
        """
        owner = "queue (ram)"
        state = require_state(owner, state)
        in_epoch = require_int(owner, state, "in_epoch", high=self.epoch_size) if "in_epoch" in state else 0
        self.telemetry_log.load_state_dict(state, owner)
        self._resume_at = in_epoch
        run = self._run
        if run is not None:
            run.store.recount()

    def __repr__(self) -> str:
        return (
            f"QueueDataset(mode={self.mode!r}, capacity={self.capacity}, budget={megabytes(self.budget)}, "
            f"workers={self.num_workers} {self.worker_type}, batch_size={self.batch_size}, "
            f"epoch_size={self.epoch_size})"
        )
