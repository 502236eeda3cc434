"""One pass of torch's multiprocess ``DataLoader`` iterator under loaderfactory's error contract.

:class:`ProcessWorkers`, ``ResumableDataLoader`` (loader kind ``torch``) and ``ThreadDataLoader``
all run torch's worker processes; this module wraps their passes, so each of them reports a dead
worker the same way: a :class:`~loaderfactory.errors.WorkerError` naming its pid, within
milliseconds (torch checks its workers every 5 s), also for a worker of a persistent pool that died
between epochs. A stall becomes a :class:`~loaderfactory.errors.StallError`, and stopping a pass
(or every pass of a ``DataLoader``) is :func:`stop_loader_workers` here and nowhere else.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from torch.utils.data import DataLoader

from loaderfactory.components.workers.batch_transfer import small_batches_by_value
from loaderfactory.components.workers.exits import (
    KILL_GRACE_S,
    ExitWatcher,
    Woken,
    exit_error,
    fd_limit_advice,
    out_of_descriptors,
    stop_workers,
)
from loaderfactory.components.workers.parent_death import workers_exit_with_parent
from loaderfactory.components.workers.socket_folder import check_socket_folder
from loaderfactory.components.workers.torch_internals import (
    awaited_worker,
    forget_iterator,
    interrupt_wait,
    is_shut_down,
    keeps_workers,
    post_result,
    running_iterator,
    unregister_pids,
    worker_processes,
)
from loaderfactory.components.workers.uninterruptible import uninterruptible
from loaderfactory.errors import StallError, WorkerError


class WatchedPass:
    """The results of torch's multiprocess ``iterator``, or the error of a worker that died.

    Costs one watcher thread. ``on_exit`` is also called (on that thread) with the error, for
    consumers that do not wait on the results themselves. With ``timeout`` (the loader's), torch's
    "timed out" becomes a :class:`StallError`; without, torch's error is kept (as a plain
    ``DataLoader`` raises it). Iterating past a :class:`Woken` (posted by :meth:`stop`) ends the pass.
    """

    def __init__(
        self,
        iterator: Any,
        name: str,
        timeout: float | None = None,
        on_exit: Callable[[WorkerError], None] | None = None,
    ) -> None:
        self.iterator = iterator
        self.name = name
        self.timeout = timeout
        self.on_exit = on_exit
        self.died: WorkerError | None = None
        self._watcher: ExitWatcher | None = None  # first: __del__ reads it even if __init__ is cut short
        self._waiting: threading.Thread | None = None  # the thread inside next(), woken by a death
        unregister_pids(iterator)  # the watcher reports a death, to the thread that waits
        this = weakref.ref(self)  # the watcher must not keep an abandoned pass alive

        def report(error: WorkerError) -> None:
            watched = this()
            if watched is not None:
                watched._on_exit(error)

        self._watcher = ExitWatcher(iterator, name, report)

    def _on_exit(self, error: WorkerError) -> None:
        self.died = error  # first: a consumer about to wait sees it, or is seen waiting below
        if self._waiting is not None:
            interrupt_wait(self.iterator)
        if self.on_exit is not None:
            self.on_exit(error)

    def __iter__(self) -> WatchedPass:
        return self

    def __next__(self) -> Any:
        self._waiting = threading.current_thread()
        try:
            if self.died is not None:
                raise StopIteration
            result = next(self.iterator)
        except StopIteration:
            if self.died is None:
                self.stop_watching()  # the pass is complete: torch stopped or kept its workers
                raise
            raise self._fail(self.died) from None
        except BaseException as error:
            if self.died is not None:  # interrupted by the watcher
                raise self._fail(self.died) from error
            if isinstance(error, (RuntimeError, OSError, EOFError)):  # a dead or stuck worker
                raise self._explain(error) from error
            raise
        finally:
            self._waiting = None
        if isinstance(result, Woken):
            if self.died is not None:
                raise self._fail(self.died)
            raise StopIteration  # stopped by another thread
        return result

    def _fail(self, error: WorkerError) -> WorkerError:
        self.stop(0.0)
        return error

    def _explain(self, error: RuntimeError | OSError | EOFError) -> BaseException:
        """torch's error about a dead or stuck worker (or a broken hand-over) as ours."""
        workers = worker_processes(self.iterator)
        if out_of_descriptors(error):
            self.stop(0.0)
            return WorkerError(f"{self.name}: {fd_limit_advice()}")
        if not isinstance(error, RuntimeError) and workers and wait([p.sentinel for p in workers], 0.5):
            # A worker killed while handing over a tensor breaks the connection a moment before it
            # exits: let the watcher reap it (two threads reaping one process race in waitpid).
            watcher = self._watcher
            if watcher is not None:
                watcher.join(1.5)
            if self.died is not None:
                return self._fail(self.died)
        for index, process in enumerate(workers):
            process.join(0.5 if process.exitcode is None and not process.is_alive() else 0)
            if process.exitcode is not None and process.exitcode != 0:
                return self._fail(exit_error(self.name, index, process))
        if "timed out" in str(error) and self.timeout is not None:
            index = awaited_worker(self.iterator) or 0
            pid = workers[index].pid if index < len(workers) else "?"
            self.stop(0.0)  # at once: a stuck worker must not hold up the error
            return StallError(
                f"{self.name}: worker {index} (pid {pid}) sent no batch for {self.timeout} s (timeout); "
                "it is stuck or too slow: raise the timeout or check the dataset"
            )
        return error

    def stop_watching(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()

    def stop(self, grace_s: float, keep_persistent: bool = False) -> None:
        """Stop the workers within ``grace_s`` (0: at once) and release a thread waiting in the pass.

        With ``keep_persistent``, persistent workers stay for the next pass and only the wait ends.
        """
        self.stop_watching()
        waiting = self._waiting
        wake = waiting is not None and waiting is not threading.current_thread()
        if keep_persistent and keeps_workers(self.iterator):
            if wake:
                post_result(self.iterator, Woken())
            return
        stop_workers(self.iterator, grace_s, KILL_GRACE_S, wake=wake)

    def __del__(self) -> None:
        self.stop_watching()


@uninterruptible
def begin_pass(loader: DataLoader[Any], begin: Callable[[], Iterator[Any]], name: str) -> Iterator[Any]:
    """``begin()`` (torch's ``iter(loader)``), raising :class:`WorkerError` for a persistent worker
    that died since the last pass.

    torch waits for each persistent worker to acknowledge the new epoch and notices a dead one
    after 5 s, with its own ``RuntimeError``; a watcher interrupts that wait at once. Workers
    stopped after an error are forgotten, so the pass starts new ones. Workers it starts exit with
    this process (:mod:`~loaderfactory.components.workers.parent_death`).
    """
    previous = running_iterator(loader)
    if previous is not None and is_shut_down(previous):
        forget_iterator(loader)
        previous = None
    if previous is None:
        if loader.num_workers > 0:
            check_socket_folder()
        with workers_exit_with_parent(loader):
            return begin()
    died: list[WorkerError] = []

    def interrupt(error: WorkerError) -> None:
        died.append(error)
        interrupt_wait(previous)

    watcher = ExitWatcher(previous, name, interrupt)
    try:
        return begin()
    except BaseException as error:
        watcher.join(1.0)  # a worker that just died: let the watcher name it
        if not died:
            raise
        stop_workers(previous, 0.0, KILL_GRACE_S)
        forget_iterator(loader)
        raise died[0] from error
    finally:
        watcher.stop()


def passes_lock(loader: DataLoader[Any]) -> threading.RLock:
    """The lock under which ``loader``'s passes start and stop (made on first use), so a stop from
    another thread never comes between a pass starting its workers and being recorded."""
    lock: threading.RLock = loader.__dict__.setdefault("_passes_lock", threading.RLock())
    return lock


@uninterruptible
def start_pass(loader: DataLoader[Any], begin: Callable[[], Iterator[Any]], name: str) -> Iterator[Any]:
    """:func:`begin_pass`, as a :class:`WatchedPass` where it runs worker processes, whose small
    batches come back by value (:mod:`~loaderfactory.components.workers.batch_transfer`); recorded
    as ``loader._live`` (a weak reference) for :func:`stop_loader_workers`."""
    with passes_lock(loader):
        with small_batches_by_value(loader):
            iterator = begin_pass(loader, begin, name)
        running = WatchedPass(iterator, name) if worker_processes(iterator) else iterator
        loader._live = weakref.ref(running)
    return running


def stop_loader_workers(loader: DataLoader[Any], grace_s: float, keep_persistent: bool = False) -> None:
    """Stop the worker processes of ``loader``'s running pass (recorded as ``loader._live``, a weak
    reference) and its persistent ones, within ``grace_s``; a thread waiting for a batch is woken."""
    with passes_lock(loader):
        live = getattr(loader, "_live", None)
        running = live() if live is not None else None
        if isinstance(running, WatchedPass):
            running.stop(grace_s, keep_persistent)
        if not keep_persistent:
            persistent = running_iterator(loader)
            if persistent is not None:
                stop_workers(persistent, grace_s, KILL_GRACE_S)
            forget_iterator(loader)
