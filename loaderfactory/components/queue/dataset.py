"""``QueueDataset``: batches drawn at random from items held in memory, refilled by background workers.

Turns slow storage into fast training: workers load items into a bounded in-memory queue, and each
batch is drawn uniformly at random from whatever the queue holds. Improves on torchvtk's
``TorchQueueDataset``: the RAM budget holds by bytes for every item actually loaded (not an estimate
from the first file), ``wait_fill=True`` waits for a full queue and raises on timeout, an epoch is
``epoch_size`` batches, a failing or killed worker stops the queue with an error instead of leaving
it to resample stale items, and the seed's ``ram_use=1.5`` keeps meaning 1.5 MB.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, IterableDataset

from loaderfactory.components.data.batch_utils import batch_nbytes
from loaderfactory.components.data.collate import DictCollate
from loaderfactory.components.data.transforms import takes_generator
from loaderfactory.components.queue.store import IndexDispenser, Mode, QueueStore, megabytes
from loaderfactory.components.queue.telemetry import QueueTelemetry
from loaderfactory.components.queue.workers import Worker, start_workers, stop_workers
from loaderfactory.config.sizes import parse_size
from loaderfactory.errors import ConfigError, ConfigProblem, StallError

MB = 10**6
ALIASES = {
    "bs": "batch_size",
    "q_maxlen": "capacity",
    "ram_use": "ram_budget",
    "epoch_len": "epoch_size",
    "sample_tfm": "sample_transforms",
    "batch_tfm": "batch_transforms",
    "preprocess_fn": "preprocess",
    "collate_fn": "collate",
}
"""torchvtk's argument names → ours."""


def budget_bytes(ram_budget: float | int | str, available: int) -> int:
    """Bytes from a float in (0, 1] (fraction of ``available``), an int (bytes) or a size string."""
    if isinstance(ram_budget, str):
        try:
            return parse_size(ram_budget)
        except ValueError as err:
            raise ConfigError(ConfigProblem("ram_budget", str(err))) from None
    if isinstance(ram_budget, bool) or not isinstance(ram_budget, int | float) or ram_budget <= 0:
        raise ConfigError(
            ConfigProblem(
                "ram_budget", f"must be a fraction in (0, 1], bytes or a size string, got {ram_budget!r}"
            )
        )
    if isinstance(ram_budget, float):
        if ram_budget > 1:
            raise ConfigError(
                ConfigProblem(
                    "ram_budget", f"a float is a fraction of available memory in (0, 1], got {ram_budget}"
                )
            )
        return int(ram_budget * available)
    return ram_budget


def _as_transform(fn: Callable[..., Any] | None) -> Callable[[Any, torch.Generator], Any] | None:
    if fn is None:
        return None
    if takes_generator(fn):
        return fn
    return lambda item, generator: fn(item)


class QueueDataset(IterableDataset[Any]):
    """Batches of ``batch_size`` items drawn uniformly at random from a queue of loaded items in RAM.

    Use it when loading an item is much slower than a training step (network disks, heavy
    decoding) and seeing an item several times per pass is acceptable. In mode ``"onsample"`` each
    draw from a full queue lets the oldest item out and the next draw waits for its replacement
    (gentle on storage, reproducible with one worker and a seed); in mode ``"always"`` the workers
    replace the oldest items as fast as they load and draws never wait once the queue has filled.
    Costs ``num_workers`` threads or processes and up to ``ram_budget`` of memory, plus one item
    in flight per worker. Workers start at the first iteration; breaking out of an epoch early,
    ``close()`` or garbage collection stops them (the next iteration starts a fresh queue).

    Args:
        dataset: a map-style dataset (``len`` and ``[i]``) of dict items.
        epoch_size: batches per epoch (``len()``).
        mode: ``"onsample"`` or ``"always"``.
        num_workers: loading workers, at least 1.
        worker_type: ``"thread"`` (loading that releases the GIL: I/O, decoding in C) or
            ``"process"`` (items arrive in shared memory).
        capacity: most items held; ``None`` derives it from the budget and ``avg_item_size``
            (the byte budget applies either way). Never more than ``len(dataset)``.
        ram_budget: a float in (0, 1] (fraction of available memory), bytes, or a size string
            (``"2GiB"``). The items held never exceed it in bytes.
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
        **aliases: torchvtk's names: ``bs``, ``q_maxlen``, ``ram_use`` (≤ 1: fraction, > 1: MB),
            ``epoch_len``, ``sample_tfm``, ``batch_tfm``, ``preprocess_fn``, ``collate_fn``.
    """

    def __init__(
        self,
        dataset: Any,
        epoch_size: int = 1000,
        mode: Mode = "onsample",
        num_workers: int = 1,
        worker_type: Literal["thread", "process"] = "thread",
        capacity: int | None = None,
        ram_budget: float | int | str = 0.5,
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
        **aliases: Any,
    ) -> None:
        given = dict(locals())
        for old, new in aliases.items():
            if old not in ALIASES:
                raise TypeError(f"QueueDataset got an unexpected argument {old!r}")
            canonical = ALIASES[old]
            if given[canonical] is not _DEFAULTS[canonical]:
                raise TypeError(f"{old!r} and {canonical!r} name the same argument; give one")
            if old == "ram_use" and isinstance(new, int | float) and not isinstance(new, bool) and new > 1:
                new = int(new * MB)  # torchvtk: ram_use > 1 is a budget in MB
            elif old == "ram_use" and isinstance(new, int | float):
                new = float(new)
            given[canonical] = new
        self._configure(**{k: given[k] for k in _DEFAULTS})

    def _configure(self, **kw: Any) -> None:
        problems = []
        dataset = kw["dataset"]
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
            raise TypeError(
                f"QueueDataset needs a map-style dataset (len and [i]), got {type(dataset).__name__}"
            )
        self.dataset = dataset
        self.length = len(dataset)
        if self.length < 1:
            problems.append(ConfigProblem("dataset", "is empty"))
        for name in ("epoch_size", "num_workers", "batch_size"):
            if not isinstance(kw[name], int) or kw[name] < 1:
                problems.append(ConfigProblem(name, f"must be an int >= 1, got {kw[name]!r}"))
        if kw["mode"] not in ("onsample", "always"):
            problems.append(ConfigProblem("mode", f"must be 'onsample' or 'always', got {kw['mode']!r}"))
        if kw["worker_type"] not in ("thread", "process"):
            problems.append(
                ConfigProblem("worker_type", f"must be 'thread' or 'process', got {kw['worker_type']!r}")
            )
        if kw["capacity"] is not None and (not isinstance(kw["capacity"], int) or kw["capacity"] < 1):
            problems.append(ConfigProblem("capacity", f"must be an int >= 1 or None, got {kw['capacity']!r}"))
        wait_fill = kw["wait_fill"]
        if not isinstance(wait_fill, bool) and (not isinstance(wait_fill, int) or wait_fill < 1):
            problems.append(
                ConfigProblem("wait_fill", f"must be true, false or an int >= 1, got {wait_fill!r}")
            )
        if kw["on_fill_timeout"] not in ("raise", "warn"):
            problems.append(
                ConfigProblem("on_fill_timeout", f"must be 'raise' or 'warn', got {kw['on_fill_timeout']!r}")
            )
        if problems:
            raise ConfigError(problems)
        self.epoch_size: int = kw["epoch_size"]
        self.mode: Mode = kw["mode"]
        self.num_workers: int = kw["num_workers"]
        self.worker_type: str = kw["worker_type"]
        self.batch_size: int = kw["batch_size"]
        self.wait_fill: bool | int = wait_fill
        self.wait_fill_timeout: float | None = kw["wait_fill_timeout"]
        self.on_fill_timeout: str = kw["on_fill_timeout"]
        self.timeout: float | None = kw["timeout"]
        self.multiprocessing_context: str | None = kw["multiprocessing_context"]
        self.sample_transforms = _as_transform(kw["sample_transforms"])
        self.batch_transforms = _as_transform(kw["batch_transforms"])
        self.preprocess = kw["preprocess"]
        self.collate: Callable[[list[Any]], Any] = kw["collate"] or DictCollate()
        self.log_sampling: bool = kw["log_sampling"]
        self.seed: int = kw["seed"] if kw["seed"] is not None else random.SystemRandom().randrange(2**62)

        available = int(psutil.virtual_memory().available)
        self.ram_budget = kw["ram_budget"]
        self.budget = budget_bytes(kw["ram_budget"], available)
        if self.budget > available:
            raise ConfigError(
                ConfigProblem(
                    "ram_budget",
                    f"{megabytes(self.budget)} is more than the {megabytes(available)} of memory available; "
                    "give a smaller size or a fraction such as 0.5",
                )
            )
        self.item_size = self._item_size(kw["avg_item_size"])
        if self.item_size is not None and self.item_size > self.budget:
            raise ConfigError(
                ConfigProblem(
                    "ram_budget",
                    f"{megabytes(self.budget)} holds not even one item of {megabytes(self.item_size)} "
                    "(avg_item_size); raise ram_budget",
                )
            )
        capacity: int | None = kw["capacity"]
        if capacity is None and self.item_size:
            capacity = max(1, self.budget // self.item_size)
        self.capacity: int = min(capacity, self.length) if capacity is not None else self.length
        self.telemetry_log = QueueTelemetry(self.length, self.log_sampling)
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @staticmethod
    def _item_size(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, torch.Tensor | Mapping | list | tuple | np.ndarray):
            size = batch_nbytes(value)
            if size <= 0:
                raise ConfigError(
                    ConfigProblem("avg_item_size", "the example item holds no tensors to measure")
                )
            return size
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(
                ConfigProblem("avg_item_size", f"must be a size in MB > 0 or an example item, got {value!r}")
            )
        return max(1, int(value * MB))

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the workers now (the first iteration does it otherwise)."""
        self._started()

    def _started(self) -> _Run:
        with self._lock:
            if self._run is None:
                run = _Run(self)
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
        """Stop and join every worker and drop the queue (freeing its shared memory); safe to call twice."""
        with self._lock:
            finalizer, self._finalizer, self._run = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> QueueDataset:
        return self

    def __exit__(self, *exc: object) -> None:
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
        return self.epoch_size

    def __iter__(self) -> Iterator[Any]:
        finished = False
        try:
            for _ in range(self.epoch_size):
                yield self.draw()
            finished = True
        finally:
            if not finished:
                # An early break or an error ends the pass: stop the workers, as a DataLoader does.
                self.close()

    def draw(self) -> Any:
        """One batch: ``batch_size`` items drawn at random, transformed and collated."""
        run = self._run or self._started()
        entries, held, held_bytes = run.store.sample(self.batch_size, run.rng, self.timeout, "QueueDataset")
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
        fixed = sorted(
            k
            for k in ("batch_size", "collate_fn", "shuffle", "sampler", "batch_sampler", "drop_last")
            if k in kwargs
        )
        if fixed:
            raise TypeError(f"get_dataloader: {fixed} are set by the queue itself (batch_size, collate)")
        if kwargs.get("num_workers", 0):
            raise ValueError("get_dataloader: num_workers must be 0; the queue loads with its own workers")
        return DataLoader(self, batch_size=None, **kwargs)

    # -- telemetry ----------------------------------------------------------------------------
    @property
    def sampling_counts(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """How often each dataset index has been drawn (since construction)."""
        return self.telemetry_log.counts.copy()

    def telemetry(self) -> dict[str, Any]:
        """Sampling uniformity, fill level, item age, loads and memory, for the run report."""
        run = self._run
        store = run.store if run is not None else None
        report = self.telemetry_log.summary()
        report.update(
            mode=self.mode,
            workers=f"{self.num_workers} {self.worker_type}",
            capacity=self.capacity,
            budget_mb=round(self.budget / MB, 3),
        )
        if store is not None:
            report.update(qsize=len(store), held_mb=round(store.nbytes / MB, 3))
        return report

    def plot_telemetry(self, out_dir: Path) -> list[Path]:
        """The sampling-frequency histogram and (with ``log_sampling``) the fill level, as PNGs."""
        return self.telemetry_log.plot(Path(out_dir))

    def state_dict(self) -> dict[str, Any]:
        """What survives a restart: the sampling counts (the queue's items are reloaded)."""
        return {"draws": self.telemetry_log.draws, "sampling_counts": self.telemetry_log.counts.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        counts = np.asarray(state["sampling_counts"], dtype=np.int64)
        if counts.shape != (self.length,):
            raise ValueError(
                f"sampling_counts has {counts.size} entries; this dataset has {self.length} items"
            )
        self.telemetry_log.counts = counts
        self.telemetry_log.draws = int(state["draws"])

    def __repr__(self) -> str:
        return (
            f"QueueDataset(mode={self.mode!r}, capacity={self.capacity}, budget={megabytes(self.budget)}, "
            f"workers={self.num_workers} {self.worker_type}, batch_size={self.batch_size}, "
            f"epoch_size={self.epoch_size})"
        )


class _Run:
    """One start of the queue: its store, index dispenser, random streams and workers."""

    def __init__(self, queue: QueueDataset) -> None:
        self.store = QueueStore(queue.budget, queue.capacity, queue.mode)
        self.dispenser = IndexDispenser(queue.length, queue.seed)
        self.rng = random.Random(queue.seed)
        self.generator = torch.Generator().manual_seed(queue.seed)
        self.telemetry = queue.telemetry_log
        self.telemetry.watch(self.store)
        self.workers: list[Worker] = start_workers(
            queue.num_workers,
            queue.worker_type,
            queue.dataset,
            queue.preprocess,
            self.dispenser,
            self.store,
            queue.multiprocessing_context,
        )

    def stop(self) -> None:
        stop_workers(self.workers, self.store)
        self.telemetry.absorb(self.store)


_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(QueueDataset.__init__).parameters.items()
    if name not in ("self", "aliases")
}
