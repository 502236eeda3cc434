"""The one thread pool: ``num_workers`` daemon threads running a task per key, results in key order.

Both the queue's and the sharded loader's thread workers run on it. Threads share the dataset (no
copies), so it suits datasets that release the GIL (I/O, numpy, torch ops). An exception reaches
the consumer as the very object the task raised, ``KeyboardInterrupt`` and ``SystemExit`` too.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from loaderfactory.components.workers.channel import Channel, ChannelClosed
from loaderfactory.components.workers.info import WorkerInfo, set_worker_info
from loaderfactory.components.workers.lifecycle import finish_threads
from loaderfactory.errors import StallError

K = TypeVar("K")
R = TypeVar("R")

_UNBOUNDED = 2**30
"""Capacity of the task channel: :meth:`ThreadWorkers.run` bounds the tasks in flight itself."""


class _Job:
    __slots__ = ("done", "error", "key", "result", "worker")

    def __init__(self, key: Any) -> None:
        self.key = key
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.worker = -1


class ThreadWorkers(Generic[K, R]):
    """Run ``task(key)`` on ``len(seeds)`` daemon threads; :meth:`run` yields results in key order.

    Costs one thread per worker and up to ``window`` results held. Threads share the process's
    global generators, so they are not reseeded; each thread's own seed is in
    :func:`~loaderfactory.components.workers.info.get_worker_info`.

    Args:
        task: called with each key on a worker thread.
        seeds: one per worker (their count is the number of threads).
        window: tasks in flight at most (submitted and not yet yielded).
        timeout: seconds to wait for the next result before :class:`StallError`; ``None``: forever.
        rank: reported to tasks through ``get_worker_info()``.
        name: names the threads and appears in errors.
    """

    def __init__(
        self,
        task: Callable[[K], R],
        seeds: Sequence[int],
        *,
        window: int,
        timeout: float | None = None,
        rank: int = 0,
        name: str = "workers",
    ) -> None:
        if not seeds:
            raise ValueError("a thread pool needs at least one worker (one seed per worker)")
        self.name = name
        self.num_workers = len(seeds)
        self.window = max(1, window)
        self.timeout = timeout
        self._jobs: Channel[_Job] = Channel(_UNBOUNDED)
        # Jobs submitted and not yet yielded: close() fails them, so a run waiting on one taken by
        # a thread stuck in its task raises at once instead of waiting for the task.
        self._inflight: set[_Job] = set()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(
                target=_thread_main,
                args=(WorkerInfo(i, len(seeds), seed, rank, "thread"), task, self._jobs),
                name=f"{name}-thread-{i}",
                daemon=True,
            )
            for i, seed in enumerate(seeds)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, keys: Iterable[K]) -> Iterator[R]:
        """``task(key)`` for each key, in order, at most ``window`` keys ahead of the consumer."""
        pending: deque[_Job] = deque()
        source = iter(keys)
        try:
            while True:
                for key in itertools.islice(source, self.window - len(pending)):
                    job = _Job(key)
                    pending.append(job)
                    with self._lock:
                        self._inflight.add(job)
                    self._jobs.put(job)
                if not pending:
                    return
                job = pending.popleft()
                try:
                    self._wait(job)
                finally:
                    with self._lock:
                        self._inflight.discard(job)
                if job.error is not None:
                    raise job.error
                result, job.result = job.result, None
                yield result
        except ChannelClosed:
            raise RuntimeError(f"{self.name}: the thread pool was closed while running") from None
        finally:
            if pending:  # a run left early: its jobs are no concern of close() (nor of memory)
                with self._lock:
                    self._inflight.difference_update(pending)

    def _wait(self, job: _Job) -> None:
        if self.timeout is None:
            job.done.wait()
        elif not job.done.wait(self.timeout):
            raise StallError(
                f"{self.name}: worker thread {job.worker if job.worker >= 0 else '?'} sent no result for "
                f"{self.timeout} s (timeout); it is stuck or too slow: raise the timeout or check the dataset"
            )

    @property
    def pids(self) -> list[int]:
        """Threads have no process ids of their own."""
        return []

    @property
    def closed(self) -> bool:
        return self._jobs.closed

    def close(self) -> None:
        """Stop the threads after their current task; safe to call twice.

        A :meth:`run` waiting on another thread raises at once. The threads get
        :data:`~loaderfactory.components.workers.lifecycle.STOP_GRACE_S` all together to finish
        their task; one still inside it is left to finish as a daemon, with a ``RuntimeWarning``.
        """
        if self._jobs.closed:
            return
        self._jobs.close()
        with self._lock:
            jobs, self._inflight = list(self._inflight), set()
        for job in jobs:
            if not job.done.is_set():
                job.error = RuntimeError(f"{self.name}: the thread pool was closed while running")
                job.done.set()
        finish_threads(self._threads, f"{self.name} worker threads")


def _thread_main(info: WorkerInfo, task: Callable[[Any], Any], jobs: Channel[_Job]) -> None:
    set_worker_info(info)
    try:
        while True:
            job = jobs.get()
            job.worker = info.id
            try:
                job.result = task(job.key)
            except BaseException as error:  # noqa: BLE001 - KeyboardInterrupt, SystemExit too: re-raised there
                job.error = error
            job.done.set()
            del job
    except ChannelClosed:
        pass
    finally:
        set_worker_info(None)
