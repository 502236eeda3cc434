"""The one module that starts processes: worker processes on ``torch.utils.data.DataLoader``.

torch's workers give seeding, ``prefetch_factor``, in-order results, ``persistent_workers``,
``pin_memory``, dead-worker detection and tensors handed over in shared memory. On top of them
:class:`ProcessWorkers` keeps loaderfactory's error contract: a task's exception reaches the
consumer as its own type with the worker's traceback (see
:mod:`~loaderfactory.components.workers.remote`), a killed worker is a
:class:`~loaderfactory.errors.WorkerError` naming its pid, a stall a
:class:`~loaderfactory.errors.StallError`, and a worker exits soon after its parent dies.
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data import get_worker_info as torch_worker_info

from loaderfactory.components.workers.info import WorkerInfo, set_worker_info
from loaderfactory.components.workers.lifecycle import grace
from loaderfactory.components.workers.remote import RemoteFailure
from loaderfactory.components.workers.torch_internals import forget_iterator, is_shut_down, worker_processes
from loaderfactory.components.workers.uninterruptible import uninterruptible
from loaderfactory.components.workers.watched import WatchedPass, begin_pass
from loaderfactory.errors import WorkerError

K = TypeVar("K")
R = TypeVar("R")

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which a worker's ``malloc`` maps each block on its own (glibc's initial value, held fixed)."""
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter (``malloc.h``); setting it turns off the threshold's raising."""


class _Tasks(Dataset[Any]):
    """``task`` as a dataset: ``tasks[key]`` is ``task(key)``, or a :class:`RemoteFailure`."""

    def __init__(self, task: Callable[[Any], Any], name: str) -> None:
        self.task = task
        self.name = name

    def __getitem__(self, key: Any) -> Any:
        try:
            return self.task(key)
        except BaseException as error:  # noqa: BLE001 - SystemExit too: sent to the consumer, raised there
            info = torch_worker_info()
            worker = f"worker {info.id} " if info is not None else ""
            return RemoteFailure(error, f"{self.name} {worker}(pid {os.getpid()})")


class _Keys(Sampler[Any]):
    """The keys of the current run; a persistent pool is handed new ones for each run."""

    def __init__(self) -> None:
        self.keys: Iterable[Any] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys)


def _identity(item: Any) -> Any:
    return item


class _Loader(DataLoader[Any]):
    def check_worker_number_rationality(self) -> None:
        """The pool's owner chose ``num_workers``; torch's warning about more than the cores is not ours."""


class _WorkerInit:
    """Runs in each worker, before the user's ``worker_init_fn``: our worker info, Ctrl-C left to the
    parent. (Exiting with the parent is :mod:`~loaderfactory.components.workers.parent_death`'s.)"""

    def __init__(self, rank: int, user_init: Callable[[int], None] | None) -> None:
        self.rank = rank
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        info = torch_worker_info()
        assert info is not None  # torch calls worker_init_fn inside its workers only
        set_worker_info(WorkerInfo(info.id, info.num_workers, info.seed, self.rank, "process"), process=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        _hold_mmap_threshold()
        if self.user_init is not None:
            self.user_init(worker_id)


def _hold_mmap_threshold() -> None:
    """Hold glibc's mmap threshold fixed in this worker, so that freed large blocks leave its memory.

    A worker allocates each result's tensors (and their temporaries) and frees them once they are
    copied into shared memory for the parent. glibc raises its mmap threshold to the size of the
    first large block freed; from then on such blocks come from the heap, which fragments and keeps
    what they freed resident. In the queue benchmark (0.5 MiB items) each worker grew by about
    110 MiB of private memory that way, and by 12 MiB with the threshold held. Costs a map, an unmap
    and fresh page faults per block of 128 KiB or more, in the worker, off the consumer's path.
    Without glibc (another libc, macOS, Windows) nothing changes.
    """
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr (Windows), or no such name
        return
    if glibc:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


class ProcessWorkers(Generic[K, R]):
    """Run ``task(key)`` in ``num_workers`` processes; :meth:`run` yields the results in key order.

    Costs ``num_workers`` processes and up to ``prefetch`` results in shared memory. ``task`` (and
    what it holds) is pickled for ``spawn``/``forkserver``; ``fork`` shares it as it is.

    Args:
        task: called with each key in a worker process; its result's tensors cross in shared memory.
        num_workers: worker processes, at least 1.
        prefetch: results in flight at most (rounded up to a whole number per worker).
        seed: seeds the workers reproducibly (worker ``i`` gets a seed derived from it).
        in_order: yield the results in key order; ``False`` yields each as soon as it arrives.
        timeout: seconds to wait for the next result before :class:`StallError`; ``None``: forever.
        persistent_workers: keep the processes between runs (until :meth:`close`).
        pin_memory: pin results, where an accelerator is present.
        multiprocessing_context: ``"fork"`` (default where available), ``"spawn"`` or ``"forkserver"``.
        worker_init_fn: called with the worker id in each worker, after our own set-up.
        rank: reported to tasks through ``get_worker_info()``.
        on_exit: called (on a watcher thread) with a :class:`WorkerError` as soon as a worker dies
            unexpectedly; for consumers that do not wait on the results themselves.
        name: appears in errors.
    """

    def __init__(
        self,
        task: Callable[[K], R],
        num_workers: int,
        *,
        prefetch: int,
        seed: int,
        in_order: bool = True,
        timeout: float | None = None,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        multiprocessing_context: str | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        rank: int = 0,
        on_exit: Callable[[WorkerError], None] | None = None,
        name: str = "workers",
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 for worker processes, got {num_workers}")
        self.name = name
        self.num_workers = num_workers
        self.timeout = timeout
        self.on_exit = on_exit
        self._pass: WatchedPass | None = None  # first: __del__ reads it even if __init__ fails
        self._keys = _Keys()
        self._loader = _Loader(
            _Tasks(task, name),
            batch_size=None,
            sampler=self._keys,
            collate_fn=_identity,
            num_workers=num_workers,
            prefetch_factor=max(1, math.ceil(prefetch / num_workers)),
            persistent_workers=persistent_workers,
            pin_memory=pin_memory and torch.accelerator.is_available(),
            timeout=timeout or 0,
            worker_init_fn=_WorkerInit(rank, worker_init_fn),
            multiprocessing_context=multiprocessing_context or _default_context(),
            generator=torch.Generator().manual_seed(seed),
            in_order=in_order,
        )
        self._closed = False

    @uninterruptible
    def run(self, keys: Iterable[K]) -> Iterator[R]:
        """The result of ``task(key)`` for each key, in order (a new run stops the previous one)."""
        if self._closed:
            raise RuntimeError(f"{self.name}: the worker processes were closed")
        if not self._loader.persistent_workers:
            self._shutdown(grace())
        elif self._pass is not None:
            self._pass.stop_watching()  # its workers go on to this run, under a new watcher
        self._keys.keys = keys
        iterator = begin_pass(self._loader, lambda: iter(self._loader), self.name)
        self._pass = current = WatchedPass(iterator, self.name, self.timeout, self.on_exit)
        return self._results(current)

    def _results(self, current: WatchedPass) -> Iterator[R]:
        for result in current:
            if isinstance(result, RemoteFailure):
                raise result.rebuild()
            yield result

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (empty between runs of a non-persistent pool)."""
        current = self._pass
        if current is None or is_shut_down(current.iterator):
            return []
        return [process.pid for process in worker_processes(current.iterator)]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop every worker process; safe to call twice.

        The workers get :data:`~loaderfactory.components.workers.lifecycle.STOP_GRACE_S` all
        together to finish their current task, then are terminated; on an error path
        (``stopping_together(wait=False)``) or at exit they are terminated at once.
        """
        self._closed = True
        self._shutdown(grace())

    def _shutdown(self, grace_s: float = 0.0) -> None:
        """Stop the current run's workers within ``grace_s`` (0: terminate them at once)."""
        current, self._pass = self._pass, None
        if current is not None:
            current.stop(grace_s)
        forget_iterator(self._loader)  # a persistent DataLoader keeps its iterator

    def __del__(self) -> None:
        current = getattr(self, "_pass", None)
        if current is not None:
            current.stop_watching()


def _default_context() -> str:
    # fork shares the dataset without pickling it and starts in milliseconds; where it is missing
    # (macOS and Windows default to spawn) the task must be picklable.
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
