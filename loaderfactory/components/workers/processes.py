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
import threading
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import wait
from typing import Any, Generic, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data import get_worker_info as torch_worker_info

from loaderfactory.components.workers.exits import (
    ExitWatcher,
    Woken,
    exit_error,
    fd_limit_advice,
    out_of_descriptors,
    register_pids,
    stop_workers,
    unlink_segments_of,
    unregister_pids,
    wake,
)
from loaderfactory.components.workers.info import WorkerInfo, set_worker_info
from loaderfactory.components.workers.lifecycle import KILL_GRACE_S, grace
from loaderfactory.components.workers.remote import RemoteFailure
from loaderfactory.errors import StallError, WorkerError

K = TypeVar("K")
R = TypeVar("R")

PARENT_CHECK_S = 0.5
"""How often a worker checks that its parent is alive where it has no parent sentinel to watch."""

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
    """Runs first in each worker: our worker info, Ctrl-C left to the parent, exit with the parent."""

    def __init__(self, rank: int, user_init: Callable[[int], None] | None) -> None:
        self.rank = rank
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        info = torch_worker_info()
        assert info is not None  # torch calls worker_init_fn inside its workers only
        set_worker_info(WorkerInfo(info.id, info.num_workers, info.seed, self.rank, "process"), process=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        _hold_mmap_threshold()
        threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
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


def _exit_with_parent(parent_pid: int) -> None:
    """Exit this worker as soon as its parent is gone, even one killed by a signal.

    torch's own check runs only between tasks, every 5 s; a parent killed by SIGKILL could leave a
    busy worker running for as long as its task takes.
    """
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    while True:
        if sentinel is not None and wait([sentinel], PARENT_CHECK_S):
            break
        if sentinel is None:
            threading.Event().wait(PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            break
    os._exit(0)


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
        self._watcher: ExitWatcher | None = None  # first: __del__ reads it even if __init__ fails
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
        self._iterator: Any = None
        self._waiting: threading.Thread | None = None  # the thread inside next(), to wake on close
        self._closed = False

    def run(self, keys: Iterable[K]) -> Iterator[R]:
        """The result of ``task(key)`` for each key, in order (a new run stops the previous one)."""
        if self._closed:
            raise RuntimeError(f"{self.name}: the worker processes were closed")
        self._stop_watching()
        if not self._loader.persistent_workers:
            self._shutdown(grace())
        self._keys.keys = keys
        self._iterator = iterator = iter(self._loader)  # a _MultiProcessingDataLoaderIter
        # torch's SIGCHLD handler raises in the main thread wherever it is (in the training step, or
        # in the test about to expect the error): the workers are registered with it only while
        # the main thread waits in _results. Workers driven from another thread are watched below.
        unregister_pids(iterator)
        if self.on_exit is not None:
            self._watcher = ExitWatcher(iterator._workers, self.name, self.on_exit)  # type: ignore[attr-defined]  # set for num_workers > 0
        return self._results(iterator)

    def _results(self, iterator: Any) -> Iterator[R]:
        watch = threading.current_thread() is threading.main_thread()
        while True:
            try:
                if watch:
                    register_pids(iterator)
                try:
                    self._waiting = threading.current_thread()
                    result = next(iterator)
                finally:
                    self._waiting = None
                    unregister_pids(iterator)
            except StopIteration:
                return
            except (RuntimeError, OSError, EOFError) as error:  # a dead or stuck worker, a broken hand-over
                raise self._explain(iterator, error) from error
            if isinstance(result, RemoteFailure):
                raise result.rebuild()
            if isinstance(result, Woken):
                return
            yield result

    def _explain(self, iterator: Any, error: RuntimeError | OSError | EOFError) -> BaseException:
        """torch's error about a dead or stuck worker (or a broken hand-over) as WorkerError or StallError."""
        workers = list(getattr(iterator, "_workers", ()))
        if out_of_descriptors(error):
            self._shutdown()
            return WorkerError(f"{self.name}: {fd_limit_advice()}")
        ended: set[Any] = set()
        if not isinstance(error, RuntimeError) and workers:
            ended = set(wait([p.sentinel for p in workers], 0.5))
        if ended:
            # A worker killed while handing over a tensor breaks the connection a moment before it
            # exits. The exit watcher reaps it: let it finish, as two threads reaping one process
            # race in waitpid and the loser reads no exit code.
            watcher = self._watcher
            if watcher is not None:
                watcher.join(1.5)
        for index, process in enumerate(workers):
            # A closed sentinel means the process is exiting: give it a moment to become reapable.
            dying = process.sentinel in ended or (process.exitcode is None and not process.is_alive())
            process.join(0.5 if dying else 0)
            if process.exitcode is not None and process.exitcode != 0:
                error_of_exit = exit_error(self.name, index, process)
                self._shutdown()
                return error_of_exit
        if "timed out" in str(error):
            task = getattr(iterator, "_task_info", {}).get(getattr(iterator, "_rcvd_idx", -1))
            index = task[0] if task else 0
            pid = workers[index].pid if index < len(workers) else "?"
            self._shutdown()  # at once: a stuck worker must not hold up the error
            return StallError(
                f"{self.name}: worker {index} (pid {pid}) sent no batch for {self.timeout} s (timeout); "
                "it is stuck or too slow: raise the timeout or check the dataset"
            )
        return error

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (empty between runs of a non-persistent pool)."""
        iterator = self._iterator
        if iterator is None or getattr(iterator, "_shutdown", True):
            return []
        return [process.pid for process in iterator._workers]

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
        self._stop_watching()
        iterator, self._iterator = self._iterator, None
        if iterator is None:
            return
        processes = list(getattr(iterator, "_workers", ()))
        terminated = stop_workers(iterator, grace_s, KILL_GRACE_S)
        waiting = self._waiting
        if waiting is not None and waiting is not threading.current_thread():
            wake(iterator)
        for process in processes:
            # A worker stopped by a signal may have been creating a shared-memory segment.
            if process in terminated or (process.exitcode is not None and process.exitcode < 0):
                unlink_segments_of(process.pid)
        self._loader._iterator = None  # a persistent DataLoader keeps its iterator here

    def _stop_watching(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()

    def __del__(self) -> None:
        self._stop_watching()


def _default_context() -> str:
    # fork shares the dataset without pickling it and starts in milliseconds; where it is missing
    # (macOS and Windows default to spawn) the task must be picklable.
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
