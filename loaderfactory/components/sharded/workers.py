"""Worker pools of a :class:`ShardedDataLoader`: processes or threads, one task lane per worker.

Step ``i`` of a pass goes to worker ``i % num_workers`` and each worker answers in the order it was
asked, so the consumer reads results in order by waiting on one worker at a time. A process
worker sends its batch through ``torch.multiprocessing``'s pickler: tensors move into shared
memory and only a file descriptor crosses the pipe. The consumer's wait covers the expected
worker's pipe *and* every worker's exit sentinel, so a killed worker is noticed at once, and it
has a deadline, so a stuck one raises :class:`~loaderfactory.errors.StallError`.

The consumer never writes to a worker's pipe itself: a feeder thread per worker does, so a large
step cannot block the consumer while that worker is blocked sending it a large result. A worker
process closes the parent's pipe ends it inherited and exits within about a second of its parent
dying, even when the parent was killed by a signal and could not stop it.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as torch_mp  # registers torch's shared-memory reductions with ForkingPickler

from loaderfactory.components.sharded.sampling import Step
from loaderfactory.components.workers.channel import Channel, ChannelClosed
from loaderfactory.components.workers.process_utils import wait_for_parent
from loaderfactory.errors import StallError, WorkerError

Key = tuple[int, int]
"""``(pass id, step number)``: lets a persistent pool drop results of an abandoned pass."""
Result = tuple[Key, bool, Any]
"""``(key, ok, batch or packed error)``."""

_STOP_GRACE_S = 2.0
"""How long ``close()`` lets workers exit on their own before terminating them."""
"""How often an idle worker process checks that its parent is still alive."""
_UNBOUNDED = 2**30
"""Capacity of a feeder's channel: the pass bounds the steps in flight by ``prefetch``."""


@dataclass(frozen=True)
class WorkerInfo:
    """What a dataset may ask about the worker running it (see :func:`get_worker_info`)."""

    id: int
    num_workers: int
    seed: int
    rank: int
    worker_type: str


_process_info: WorkerInfo | None = None
_thread_info = threading.local()


def get_worker_info() -> WorkerInfo | None:
    """The current sharded-loader worker, or ``None`` in the main process/thread."""
    info = getattr(_thread_info, "info", None)
    return info if info is not None else _process_info


def worker_seed(seed: int, rank: int, worker_id: int, generation: int) -> int:
    """A 63-bit seed for one worker, distinct per rank, worker and pool generation."""
    state = np.random.SeedSequence([seed, rank, worker_id, generation]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)


def seed_everything(seed: int) -> None:
    """Seed torch, numpy's global generator and ``random`` from one number."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def make_step(dataset: Any, collate: Callable[[list[Any]], Any], step: Sequence[Any]) -> Any:
    """Load and collate one step: a batch, or one batch per shard when ``step`` is a list of lists."""
    if step and isinstance(step[0], list):
        return [collate([dataset[i] for i in shard]) for shard in step]
    return collate([dataset[i] for i in step])


class WorkerTraceback(Exception):
    """The worker's formatted traceback, attached as ``__cause__`` of the re-raised exception."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _pack_error(error: BaseException) -> tuple[bytes | None, bytes | None, str, str]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        whole = pickle.dumps(error)
        pickle.loads(whole)
    except Exception:  # noqa: BLE001 - an unpicklable exception is sent as its type and message
        whole = None
    try:
        kind = pickle.dumps(type(error))
    except Exception:  # noqa: BLE001 - a local class: the consumer raises a WorkerError instead
        kind = None
    return whole, kind, str(error), text


def unpack_error(packed: tuple[bytes | None, bytes | None, str, str], where: str) -> BaseException:
    """Re-create a worker's exception: same type, the worker's traceback as ``__cause__``."""
    whole, kind, message, text = packed
    error: BaseException | None = None
    if whole is not None:
        error = pickle.loads(whole)
    elif kind is not None:
        try:
            error = pickle.loads(kind)(message)
        except Exception:  # noqa: BLE001 - the type takes other arguments: fall back below
            error = None
    if error is None:
        error = WorkerError(f"{where} raised an exception that cannot be re-created here: {message}")
    error.__cause__ = WorkerTraceback(f"\n\n{where} raised:\n{text}")
    return error


def _process_main(
    info: WorkerInfo,
    dataset: Any,
    collate: Callable[[list[Any]], Any],
    tasks: Connection,
    results: Connection,
    inherited: Sequence[Connection] = (),
) -> None:
    global _process_info
    # A forked worker holds copies of the parent's pipe ends (its own and earlier workers'): close
    # them, so a pipe reports EOF or EPIPE once the parent (its only other holder) is gone.
    for conn in inherited:
        conn.close()
    parent_pid = os.getppid()
    # Ctrl-C goes to the whole process group: let the parent decide, and stop us through close().
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    _process_info = info
    seed_everything(info.seed)
    while True:
        try:
            if not wait_for_parent(tasks, parent_pid):
                break
            message = tasks.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        key, step = message
        try:
            # Pickling moves the batch's tensors into shared memory; only handles cross the pipe.
            payload = ForkingPickler.dumps((key, True, make_step(dataset, collate, step)))
        except BaseException as error:  # noqa: BLE001 - forwarded (SystemExit too), re-raised there
            payload = ForkingPickler.dumps((key, False, _pack_error(error)))
        try:
            results.send_bytes(payload)
        except (BrokenPipeError, OSError):
            break


def _describe_exit(index: int, process: Any) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker {index} (pid {process.pid}) was killed by {name} (signal {-code})"
    return f"worker {index} (pid {process.pid}) exited with code {code} without sending its batch"


class ProcessPool:
    """``num_workers`` processes, each running the dataset and collate on the steps it is sent.

    Costs one process and one feeder thread per worker plus two pipes each; batches in flight
    live in shared memory. :meth:`submit` never blocks: the caller bounds the steps in flight.
    """

    def __init__(
        self,
        dataset: Any,
        collate: Callable[[list[Any]], Any],
        seeds: Sequence[int],
        rank: int = 0,
        context: str | None = None,
        name: str = "ShardedDataLoader",
    ) -> None:
        method = context or _default_context()
        ctx = torch_mp.get_context(method)
        self.name = name
        self.num_workers = len(seeds)
        self._processes: list[Any] = []
        self._tasks: list[Connection] = []
        self._results: list[Connection] = []
        self._queues: list[Channel[bytes]] = []
        self._feeders: list[threading.Thread] = []
        self._finalizer = weakref.finalize(
            self, _shutdown, self._processes, self._tasks, self._results, self._queues, self._feeders
        )
        for index, seed in enumerate(seeds):
            task_out, task_in = ctx.Pipe(duplex=False)
            result_out, result_in = ctx.Pipe(duplex=False)
            info = WorkerInfo(index, len(seeds), seed, rank, "process")
            # Only a forked child inherits the parent's ends; spawn and forkserver start clean.
            inherited = [*self._tasks, *self._results, task_in, result_out] if method == "fork" else []
            process = ctx.Process(  # type: ignore[attr-defined]  # every concrete context has Process
                target=_process_main,
                args=(info, dataset, collate, task_out, result_in, inherited),
                name=f"{name}-worker-{index}",
                daemon=True,
            )
            self._tasks.append(task_in)
            self._results.append(result_out)
            try:
                process.start()
            finally:
                task_out.close()
                result_in.close()
            self._processes.append(process)
        # Feeders start once every worker is forked, so no child inherits a running thread.
        for index, conn in enumerate(self._tasks):
            queue: Channel[bytes] = Channel(_UNBOUNDED)
            feeder = threading.Thread(
                target=_feed, args=(queue, conn), name=f"{name}-feeder-{index}", daemon=True
            )
            self._queues.append(queue)
            self._feeders.append(feeder)
            feeder.start()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def submit(self, worker: int, key: Key, step: Step) -> None:
        """Queue ``step`` for ``worker``'s feeder thread; never waits for the worker to read it."""
        data = bytes(ForkingPickler.dumps((key, step)))
        try:
            self._queues[worker].put(data)
        except ChannelClosed:
            # The feeder stopped because the worker's pipe broke: the worker is gone.
            self._processes[worker].join(1.0)
            raise WorkerError(f"{self.name}: {_describe_exit(worker, self._processes[worker])}") from None

    def receive(self, worker: int, timeout: float | None) -> Result:
        """The next result of ``worker``; WorkerError if any worker died, StallError past ``timeout``."""
        conn = self._results[worker]
        sentinels = [p.sentinel for p in self._processes]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([conn, *sentinels], remaining)
            if conn in ready:
                try:
                    return ForkingPickler.loads(conn.recv_bytes())  # type: ignore[no-any-return]  # our own tuples
                except (EOFError, OSError):
                    # EOF: the worker is gone. OSError (connection reset): it sent its batch and died
                    # before we fetched the shared-memory handles, which only it could hand over.
                    self._processes[worker].join(1.0)
                    raise WorkerError(
                        f"{self.name}: {_describe_exit(worker, self._processes[worker])}"
                    ) from None
            if ready:
                for index, process in enumerate(self._processes):
                    if process.exitcode is not None:
                        raise WorkerError(f"{self.name}: {_describe_exit(index, process)}")
                continue
            process = self._processes[worker]
            raise StallError(
                f"{self.name}: worker {worker} (pid {process.pid}) sent no batch for {timeout} s (timeout); "
                "it is stuck or too slow: raise the timeout or check the dataset"
            )

    def close(self) -> None:
        """Stop every worker (terminating those that don't stop in time) and close the pipes."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _default_context() -> str:
    # fork shares the dataset without pickling it and starts in milliseconds; where it is missing
    # (macOS and Windows default to spawn) the dataset must be picklable.
    return "fork" if "fork" in torch_mp.get_all_start_methods() else "spawn"


def _feed(queue: Channel[bytes], conn: Connection) -> None:
    """A feeder thread: send the queued steps to one worker in order, then ``None`` to stop it."""
    try:
        while True:
            try:
                data = queue.get()
            except ChannelClosed:
                break
            conn.send_bytes(data)
        conn.send(None)
    except (BrokenPipeError, OSError):
        queue.close()  # the worker is gone: the next submit raises WorkerError


def _shutdown(
    processes: list[Any],
    tasks: list[Connection],
    results: list[Connection],
    queues: list[Channel[bytes]],
    feeders: list[threading.Thread],
) -> None:
    for queue in queues:
        queue.close()  # each feeder drops the steps not yet sent and asks its worker to stop
    deadline = time.monotonic() + _STOP_GRACE_S
    _drain_until_exit(processes, results, deadline)
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join(1.0)
        if process.is_alive():
            warnings.warn(f"{process.name} (pid {process.pid}) did not exit", RuntimeWarning, stacklevel=2)
    # A feeder blocked on a full pipe is freed by its worker's exit (EPIPE); only then may the
    # pipes close, as closing a descriptor another thread writes to is unsafe.
    current = threading.current_thread()
    for feeder in feeders:
        if feeder is not current:
            feeder.join(_STOP_GRACE_S)
        if feeder.is_alive():
            warnings.warn(f"{feeder.name} did not exit", RuntimeWarning, stacklevel=2)
    for conn in [*tasks, *results]:
        conn.close()


def _drain_until_exit(processes: list[Any], results: list[Connection], deadline: float) -> None:
    """Wait for the workers to exit, reading (and dropping) the results they are still sending.

    A worker blocked sending a large result would otherwise never read its stop message.
    """
    open_results = list(results)
    while any(p.exitcode is None for p in processes):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        sentinels = [p.sentinel for p in processes if p.exitcode is None]
        ready = wait([*open_results, *sentinels], remaining)
        for conn in [c for c in open_results if c in ready]:
            try:
                conn.recv_bytes()
            except (EOFError, OSError):
                open_results.remove(conn)


class ThreadPool:
    """``num_workers`` threads sharing the dataset; exceptions reach the consumer as the same object.

    Costs one thread per worker and no copies. Suits datasets that release the GIL (I/O, numpy,
    torch ops). Threads share the process's global generators, so they are not reseeded; each
    thread's own seed is in :func:`get_worker_info` for datasets that make their generators from
    it. A thread stuck inside the dataset cannot be killed: after a stall it is left to finish as
    a daemon.
    """

    def __init__(
        self,
        dataset: Any,
        collate: Callable[[list[Any]], Any],
        seeds: Sequence[int],
        rank: int = 0,
        capacity: int = 8,
        name: str = "ShardedDataLoader",
    ) -> None:
        self.name = name
        self.num_workers = len(seeds)
        self._tasks: list[Channel[Any]] = [Channel(capacity) for _ in seeds]
        self._results: list[Channel[Result]] = [Channel(capacity) for _ in seeds]
        self._threads = [
            threading.Thread(
                target=_thread_main,
                args=(WorkerInfo(i, len(seeds), seed, rank, "thread"), dataset, collate, tasks, results),
                name=f"{name}-thread-{i}",
                daemon=True,
            )
            for i, (seed, tasks, results) in enumerate(zip(seeds, self._tasks, self._results, strict=True))
        ]
        for thread in self._threads:
            thread.start()
        self._finalizer = weakref.finalize(self, _stop_threads, self._threads, self._tasks, self._results)

    def submit(self, worker: int, key: Key, step: Step) -> None:
        self._tasks[worker].put((key, step))

    def receive(self, worker: int, timeout: float | None) -> Result:
        try:
            return self._results[worker].get(timeout)
        except TimeoutError:
            raise StallError(
                f"{self.name}: worker thread {worker} sent no batch for {timeout} s (timeout); "
                "it is stuck or too slow: raise the timeout or check the dataset"
            ) from None
        except ChannelClosed:
            raise WorkerError(f"{self.name}: worker thread {worker} was stopped") from None

    def close(self) -> None:
        """Stop the threads; one stuck inside the dataset is left to finish as a daemon."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _thread_main(
    info: WorkerInfo,
    dataset: Any,
    collate: Callable[[list[Any]], Any],
    tasks: Channel[Any],
    results: Channel[Result],
) -> None:
    _thread_info.info = info
    try:
        while True:
            key, step = tasks.get()
            try:
                result: Result = (key, True, make_step(dataset, collate, step))
            except BaseException as error:  # noqa: BLE001 - KeyboardInterrupt, SystemExit too: re-raised there
                result = (key, False, error)
            results.put(result)
            del result
    except ChannelClosed:
        pass
    finally:
        # Whatever ends this thread, the consumer waiting on it gets a WorkerError, not a hang.
        results.close()


def _stop_threads(
    threads: list[threading.Thread], tasks: list[Channel[Any]], results: list[Channel[Result]]
) -> None:
    for channel in [*tasks, *results]:
        channel.close()
    current = threading.current_thread()
    for thread in threads:
        if thread is not current:
            thread.join(_STOP_GRACE_S)
