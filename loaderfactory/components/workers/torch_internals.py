"""Every private name of torch this package uses, each behind a small function that says why.

torch's ``DataLoader`` gives the worker processes (seeding, ``worker_init_fn``, tensors in shared
memory, pinning, persistence); it has no public way to stop its workers in bounded time, to watch
them from another thread, or to end a wait for a result that will never come. The functions here
reach into it, and nothing else in the package does. :data:`PRIVATE_NAMES` lists the names;
``tests/components/test_torch_internals.py`` checks each against the installed torch, so an upgrade that
renames one fails there instead of in a training run.
"""

from __future__ import annotations

import _multiprocessing  # type: ignore[import-not-found]  # no stubs: SemLock._rebuild below
import contextlib
import select
from multiprocessing.reduction import ForkingPickler
from typing import Any, Literal, NamedTuple

from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory


class PrivateName(NamedTuple):
    """A private name: where it lives and what it must be (a callable or a plain attribute)."""

    owner: Literal[
        "signal_handling",
        "pin_memory",
        "DataLoader",
        "iterator",
        "result_queue",
        "done_event",
        "condition",
        "mp_lock",
        "SemLock",
    ]
    name: str
    kind: Literal["callable", "attribute"]


PRIVATE_NAMES = (
    PrivateName("pin_memory", "pin_memory", "callable"),
    PrivateName("signal_handling", "_remove_worker_pids", "callable"),
    PrivateName("DataLoader", "_iterator", "attribute"),
    PrivateName("iterator", "_workers", "attribute"),
    PrivateName("iterator", "_shutdown", "attribute"),
    PrivateName("iterator", "_persistent_workers", "attribute"),
    PrivateName("iterator", "_workers_done_event", "attribute"),
    PrivateName("iterator", "_workers_status", "attribute"),
    PrivateName("iterator", "_mark_worker_as_unavailable", "callable"),
    PrivateName("iterator", "_shutdown_workers", "callable"),
    PrivateName("iterator", "_worker_pids_set", "attribute"),
    PrivateName("iterator", "_pin_memory", "attribute"),
    PrivateName("iterator", "_worker_result_queue", "attribute"),
    PrivateName("iterator", "_data_queue", "attribute"),
    PrivateName("iterator", "_rcvd_idx", "attribute"),
    PrivateName("iterator", "_task_info", "attribute"),
    PrivateName("result_queue", "_sem", "attribute"),
    PrivateName("result_queue", "_writer", "attribute"),
    # multiprocessing's own, under torch's done event (see free_stop_signal)
    PrivateName("done_event", "_cond", "attribute"),
    PrivateName("condition", "_lock", "attribute"),
    PrivateName("mp_lock", "_semlock", "attribute"),
    PrivateName("SemLock", "_rebuild", "callable"),
)
"""Every private name used below; ``owner`` ``iterator`` is ``_MultiProcessingDataLoaderIter``,
``done_event`` its ``_workers_done_event`` and ``condition``/``mp_lock`` what that holds."""


def pin_memory(batch: Any) -> Any:
    """Pin ``batch`` as torch's pin-memory thread does (nested dicts, lists, tuples, tensors).

    Batches loaded by thread workers are pinned on the consumer's thread; torch has no public
    function for a whole nested batch.
    """
    return _pin_memory(batch)  # type: ignore[no-untyped-call]  # torch's helper is untyped


def running_iterator(loader: DataLoader[Any]) -> Any:
    """The iterator a persistent ``DataLoader`` keeps between passes (``None`` when it has none)."""
    # DataLoader._iterator: where torch keeps the persistent workers, which close() must stop.
    return getattr(loader, "_iterator", None)


def forget_iterator(loader: DataLoader[Any]) -> None:
    """Make the next ``iter(loader)`` start new workers instead of reusing stopped ones."""
    loader._iterator = None


def worker_processes(iterator: Any) -> list[Any]:
    """The worker processes of torch's iterator; empty for a single-process one."""
    # _workers: the exit watcher waits on their sentinels; torch looks at them every 5 s only.
    return list(getattr(iterator, "_workers", ()))


def is_shut_down(iterator: Any) -> bool:
    """Whether torch stopped (or is stopping) the iterator's workers, or it never had any.

    torch sets ``_shutdown`` before its workers exit, so an exit it caused (an epoch done without
    persistent workers) is not taken for a dead worker.
    """
    return bool(getattr(iterator, "_shutdown", True))


def let_go(iterator: Any, worker_id: int) -> bool:
    """Whether torch told worker ``worker_id`` to stop while the others go on: its part of an
    ``IterableDataset`` read to the end, without persistent workers, it exits with code 0."""
    status = getattr(iterator, "_workers_status", None)
    return status is not None and not keeps_workers(iterator) and not status[worker_id]


def keeps_workers(iterator: Any) -> bool:
    """Whether the iterator's workers outlive the pass (``persistent_workers``)."""
    return bool(getattr(iterator, "_persistent_workers", False))


def ask_workers_to_stop(iterator: Any) -> None:
    """Send each worker torch's stop request (the done event, a ``None`` index), all at once.

    torch's own ``_shutdown_workers`` sends it and then joins one worker after another, 5 s each;
    asking all first lets them stop together within one grace.
    """
    iterator._workers_done_event.set()
    for worker_id in range(len(iterator._workers)):
        if iterator._persistent_workers or iterator._workers_status[worker_id]:
            iterator._mark_worker_as_unavailable(worker_id, shutdown=True)


def free_stop_signal(iterator: Any, wait_s: float = 0.2) -> None:
    """Free torch's done event from a worker killed by a signal while it held the event's lock.

    Workers read the event (``is_set()`` takes a lock shared by every process); a worker killed in
    that moment leaves the lock taken for good, and torch (``_mark_worker_as_unavailable``,
    ``_shutdown_workers``) then waits on it forever. A live holder keeps it for microseconds, so a
    lock still taken after ``wait_s`` is the dead worker's. It is released through a second handle
    on the same semaphore, so the lock object here keeps its own count of acquisitions (which
    ``Condition.notify`` checks); the handle is kept, since closing it would close the semaphore.
    (``_cond``, ``_lock``, ``_semlock`` and ``SemLock._rebuild`` are ``multiprocessing``'s own.)
    """
    event = getattr(iterator, "_workers_done_event", None)
    lock = getattr(getattr(event, "_cond", None), "_lock", None)
    semlock = getattr(lock, "_semlock", None)
    if lock is None or semlock is None or lock.acquire(timeout=wait_s):
        if lock is not None and semlock is not None:
            lock.release()
        return
    with contextlib.suppress(ValueError, TypeError, AttributeError, OSError):
        twin = _multiprocessing.SemLock._rebuild(semlock.handle, semlock.kind, semlock.maxvalue, None)
        twin.release()
        _FREED_HANDLES.append(twin)


_FREED_HANDLES: list[Any] = []
"""Second handles made by :func:`free_stop_signal`, never closed (see there)."""


def finish_shutdown(iterator: Any) -> None:
    """torch's clean-up once the workers are gone: queues, pin-memory thread, bookkeeping."""
    iterator._shutdown_workers()


def unregister_pids(iterator: Any) -> None:
    """Take the workers out of torch's SIGCHLD handler.

    That handler raises torch's ``RuntimeError`` in the main thread wherever it is (in the training
    step, in a ``finally``) when a worker dies; the exit watcher reports it instead, as a
    ``WorkerError``, to the thread that waits for batches.
    """
    if getattr(iterator, "_worker_pids_set", False):
        signal_handling._remove_worker_pids(id(iterator))  # type: ignore[attr-defined]  # private
        iterator._worker_pids_set = False


def awaited_worker(iterator: Any) -> int | None:
    """The worker that owes the batch the iterator waits for next (for a stall's message)."""
    task = getattr(iterator, "_task_info", {}).get(getattr(iterator, "_rcvd_idx", -1))
    return int(task[0]) if task else None


def post_result(iterator: Any, value: Any) -> None:
    """Hand ``value`` to a thread waiting inside ``next(iterator)`` as the result it waits for.

    torch waits on its result queue and re-checks its workers only every 5 s; after a shutdown, or
    with a worker dead, it would wait that long or forever. The bytes go straight into the pipe:
    ``put`` would start a feeder thread that waits for the queue's lock, which a worker stopped
    while writing may hold. With pinning the waiting thread reads torch's in-process queue.
    """
    if hasattr(iterator, "_worker_result_queue"):
        message = (iterator._rcvd_idx, value)
        _post(iterator, message, ForkingPickler.dumps(message))


def interrupt_wait(iterator: Any) -> None:
    """Make a thread waiting inside torch's iterator raise at once, for a worker that died.

    torch re-checks its workers when reading its queue fails, or else every 5 s. An unreadable
    message makes the read fail now: torch raises its dead-worker ``RuntimeError``, which the
    caller replaces with its own error. This also ends torch's wait for every worker to
    acknowledge a new epoch, where a posted result would be ignored.
    """
    if hasattr(iterator, "_worker_result_queue"):
        _post(iterator, None, b"\x00")  # not a pickle: unreadable


def _post(iterator: Any, message: Any, pickled: bytes | memoryview) -> None:
    if iterator._pin_memory:  # the waiting thread reads the pin-memory thread's in-process queue
        iterator._data_queue.put(message)
        return
    results = iterator._worker_result_queue
    with contextlib.suppress(OSError, ValueError):  # a closed pipe: nobody waits on it any more
        if not _room_in(results._writer, POST_WAIT_S):
            return  # a full pipe nobody reads: no thread waits on it (one would be reading it)
        results._sem.acquire(False)  # as put() does: get() gives it back
        results._writer.send_bytes(pickled)


POST_WAIT_S = 0.5
"""How long a post waits for room in the result pipe, which workers may have filled with batches
nobody is left to read (the consumer itself closing the loader)."""


def _room_in(writer: Any, timeout: float) -> bool:
    """Whether the pipe behind ``writer`` takes a small message without blocking, waiting at most
    ``timeout`` seconds for a reader to make room. A pipe polls writable with a page free, and a
    write of at most ``select.PIPE_BUF`` bytes is whole (the posts are a few dozen bytes)."""
    poller = select.poll()
    poller.register(writer.fileno(), select.POLLOUT)
    return bool(poller.poll(timeout * 1000))
