"""The workers that fill a :class:`~loaderfactory.components.queue.dataset.QueueDataset`.

Thread workers load and put in one loop. A process worker loads in a child process and hands the
item over in shared memory (``torch.multiprocessing`` sends a tensor as a file descriptor, never its
bytes); a proxy thread in the parent tells it which index to load next, waits on both its pipe and
its process sentinel (so a killed child is noticed at once), and puts what arrives into the store.
Either way a worker holds at most one loaded item outside the queue. A worker process closes the
parent's pipe ends it inherited and exits within about a second of its parent dying, even when
the parent was killed by a signal.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing  # registers the reductions that send tensors as shared memory

from loaderfactory.components.data.batch_utils import batch_nbytes
from loaderfactory.components.queue.store import Entry, IndexDispenser, QueueStore, StoreClosed
from loaderfactory.components.workers.process_utils import wait_for_parent
from loaderfactory.errors import WorkerError

Preprocess = Callable[[Any], Any] | None

JOIN_SECONDS = 10.0
"""How long ``close()`` waits for a thread stuck inside ``dataset[i]`` before leaving it behind."""
STOP_GRACE_S = 5.0
"""How long a stopping worker process may take to finish its item before it is stopped by a signal."""
"""How often an idle worker process checks that its parent is still alive."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text (set as ``__cause__``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def load_item(dataset: Any, index: int, preprocess: Preprocess) -> Any:
    item = dataset[index]
    if preprocess is not None:
        item = preprocess(item)
    return item


def _note(error: BaseException, text: str) -> BaseException:
    add_note = getattr(error, "add_note", None)
    if callable(add_note):
        add_note(text)
    return error


# -- thread workers -----------------------------------------------------------------------------
def _thread_worker(
    dataset: Any, preprocess: Preprocess, dispenser: IndexDispenser, store: QueueStore, stop: threading.Event
) -> None:
    while not stop.is_set():
        index = dispenser.next()
        try:
            item = load_item(dataset, index, preprocess)
            store.put(Entry(item, index, batch_nbytes(item), 0.0))
        except StoreClosed:
            return
        except BaseException as error:  # noqa: BLE001 - forwarded to the consumer, re-raised there
            store.fail(_note(error, f"raised in a queue worker thread while loading item {index}"))
            return


class ThreadWorker:
    """One loading thread."""

    def __init__(
        self, number: int, dataset: Any, preprocess: Preprocess, dispenser: IndexDispenser, store: QueueStore
    ) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_thread_worker,
            args=(dataset, preprocess, dispenser, store, self._stop),
            name=f"loaderfactory-queue-worker-{number}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        if self._thread is threading.current_thread() or not self._thread.is_alive():
            return
        self._thread.join(JOIN_SECONDS)
        if self._thread.is_alive():
            warnings.warn(
                f"{self._thread.name}: dataset[i] did not return within {JOIN_SECONDS} s of close(); "
                "the daemon thread is left to finish its item",
                RuntimeWarning,
                stacklevel=4,
            )


# -- process workers ----------------------------------------------------------------------------
def _share(item: Any) -> Any:
    """Move every tensor of ``item`` into shared memory, so the pipe carries only its handle."""
    if isinstance(item, torch.Tensor):
        return item.share_memory_()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    if isinstance(item, dict):
        return {key: _share(value) for key, value in item.items()}
    if isinstance(item, list | tuple) and not hasattr(item, "_fields"):
        return type(item)(_share(value) for value in item)
    return item


def _process_main(
    dataset: Any, preprocess: Preprocess, conn: Connection, inherited: list[Connection] | None = None
) -> None:
    """Body of a worker process: load the index the parent sends, send the item back; ``None`` stops."""
    # A forked worker holds copies of every queue worker's pipe ends: close all but its own, so
    # its pipe breaks once the parent (the only other holder) is gone.
    for other in inherited or ():
        other.close()
    parent_pid = os.getppid()
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            if not wait_for_parent(conn, parent_pid):
                return
            index = conn.recv()
        except (EOFError, OSError):
            return
        if index is None:
            return
        try:
            item = _share(load_item(dataset, index, preprocess))
            message: tuple[Any, ...] = ("item", index, item, batch_nbytes(item))
        except BaseException as error:  # noqa: BLE001 - sent to the parent, re-raised in the consumer
            message = ("error", index, *_pack_error(error))
        try:
            conn.send(message)
        except (BrokenPipeError, OSError):
            return
        del message


def _pack_error(error: BaseException) -> tuple[bytes | None, str, str, str]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        packed = pickle.dumps(error)
        pickle.loads(packed)
        payload: bytes | None = packed
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its type name
        payload = None
    kind = type(error)
    return payload, f"{kind.__module__}.{kind.__qualname__}", str(error), text


def _unpack_error(payload: bytes | None, type_name: str, message: str, text: str) -> BaseException:
    error: BaseException | None = None
    if payload is not None:
        try:
            error = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - fall back to re-creating it from its type name
            error = None
    if error is None:
        error = _recreate(type_name, message)
    error.__cause__ = RemoteTraceback(text)
    return error


def _recreate(type_name: str, message: str) -> BaseException:
    module_name, _, name = type_name.rpartition(".")
    try:
        module = __import__(module_name, fromlist=[name])
        kind = getattr(module, name)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            return kind(message)
    except Exception:  # noqa: BLE001 - any failure to re-create falls back to RuntimeError
        pass
    return RuntimeError(f"{type_name}: {message}")


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exited"
    if exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class ProcessWorker:
    """One loading process plus the parent-side proxy thread that feeds it indices."""

    def __init__(
        self,
        number: int,
        dataset: Any,
        preprocess: Preprocess,
        dispenser: IndexDispenser,
        store: QueueStore,
        context: str | None,
    ) -> None:
        ctx: Any = multiprocessing.get_context(context)  # BaseContext's stubs lack Process
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._child_conn: Connection | None = child_conn
        self._forked = ctx.get_start_method() == "fork"
        # Filled by start_workers before the fork (see inherit): the pipe ends the child must close.
        self._inherited: list[Connection] = []
        self.process = ctx.Process(
            target=_process_main,
            args=(dataset, preprocess, child_conn, self._inherited),
            name=f"loaderfactory-queue-worker-{number}",
            daemon=True,
        )
        self._dispenser = dispenser
        self._store = store
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._proxy, name=f"loaderfactory-queue-proxy-{number}", daemon=True
        )

    def inherit(self, workers: list[ProcessWorker]) -> None:
        """Have the child close, once forked, every pipe end of ``workers`` but its own child end.

        Only a forked child inherits them (spawn and forkserver start clean), and only there are
        the connections handed over as they are rather than pickled.
        """
        if not self._forked:
            return
        for worker in workers:
            self._inherited.append(worker._conn)
            if worker is not self and worker._child_conn is not None:
                self._inherited.append(worker._child_conn)

    def start(self) -> None:
        """Start the process; call :meth:`start_proxy` once every process of the queue has started."""
        self.process.start()
        if self._child_conn is not None:
            self._child_conn.close()
            self._child_conn = None

    def start_proxy(self) -> None:
        self._thread.start()

    def _proxy(self) -> None:
        try:
            self._feed()
        finally:
            # Ask the worker to exit after the item it is on: stopping it by a signal could catch
            # it between creating a shared-memory segment and unlinking its name.
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(None)

    def _feed(self) -> None:
        store, conn, process = self._store, self._conn, self.process
        while not self._stop.is_set():
            index = self._dispenser.next()
            try:
                conn.send(index)
                ready = wait([conn, process.sentinel])
                message = conn.recv() if conn in ready else None
            except (EOFError, OSError):
                message = None
            if self._stop.is_set():
                return
            if message is None:
                process.join(1.0)
                store.fail(
                    WorkerError(
                        f"queue worker process pid {process.pid} {_describe_exit(process.exitcode)} "
                        f"while loading item {index}; the queue stopped instead of resampling stale items"
                    )
                )
                return
            if message[0] == "error":
                error = _unpack_error(*message[2:])
                note = f"raised in queue worker process pid {process.pid} while loading item {index}"
                store.fail(_note(error, note))
                return
            _, index, item, nbytes = message
            del message
            try:
                store.put(Entry(item, index, nbytes, 0.0))
            except StoreClosed:
                return
            except BaseException as error:  # noqa: BLE001 - forwarded to the consumer
                store.fail(error)
                return
            del item

    def stop(self) -> None:
        """Ask the proxy to stop; the worker exits after its current item (see :meth:`join`)."""
        self._stop.set()

    def join(self) -> None:
        """Wait for the worker to finish its item and exit; after ``STOP_GRACE_S`` stop it by signal."""
        deadline = time.monotonic() + STOP_GRACE_S
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_GRACE_S)
        if self.process.pid is not None:
            self.process.join(max(0.0, deadline - time.monotonic()))
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(JOIN_SECONDS)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(JOIN_SECONDS)
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(JOIN_SECONDS)
            _unlink_segments_of(self.process.pid)
            self.process.close()
        self._conn.close()


def _unlink_segments_of(pid: int) -> None:
    """Remove shared-memory names a dead worker left behind.

    torch names a segment ``torch_<pid>_...`` and unlinks the name right after creating it, so a
    name that outlives its (dead) creator can only be one it was killed in the middle of making:
    nobody else can hold it, and a worker killed by a signal would otherwise leak it.
    """
    root = Path("/dev/shm")
    if not root.is_dir():
        return
    for path in root.glob(f"torch_{pid}_*"):
        with contextlib.suppress(OSError):
            path.unlink()


Worker = ThreadWorker | ProcessWorker


def start_workers(
    count: int,
    worker_type: str,
    dataset: Any,
    preprocess: Preprocess,
    dispenser: IndexDispenser,
    store: QueueStore,
    context: str | None = None,
) -> list[Worker]:
    """Start ``count`` workers; processes all start before any proxy thread does."""
    workers: list[Worker] = []
    try:
        if worker_type == "process":
            processes = [
                ProcessWorker(n, dataset, preprocess, dispenser, store, context) for n in range(count)
            ]
            workers.extend(processes)
            for worker in processes:
                worker.inherit(processes)
                worker.start()
            for worker in processes:
                worker.start_proxy()
        else:
            threads = [ThreadWorker(n, dataset, preprocess, dispenser, store) for n in range(count)]
            workers.extend(threads)
            for thread in threads:
                thread.start()
    except BaseException:
        stop_workers(workers, store)
        raise
    return workers


def stop_workers(workers: list[Worker], store: QueueStore) -> None:
    """Stop and join every worker, then drop the items (and with them the shared memory)."""
    for worker in workers:
        worker.stop()
    store.close()
    for worker in workers:
        worker.join()
