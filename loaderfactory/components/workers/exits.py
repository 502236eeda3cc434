"""How worker processes end, as the consumer sees it: exit codes, a watcher, torch's SIGCHLD handler.

Helpers of :mod:`~loaderfactory.components.workers.processes` (which alone starts processes):
they reach into torch's ``_MultiProcessingDataLoaderIter`` where torch offers no public hook, each
for a case named in its docstring.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

from torch.utils.data._utils import signal_handling

from loaderfactory.errors import WorkerError


def describe_exit(exitcode: int | None) -> str:
    """``"was killed by signal SIGKILL"``, ``"exited with code 3"``."""
    if exitcode is None:
        return "exited"
    if exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class ExitWatcher:
    """A thread that waits on the workers' exit sentinels and reports the first unexpected exit."""

    def __init__(self, processes: list[Any], name: str, on_exit: Callable[[WorkerError], None]) -> None:
        self._read, self._write = os.pipe()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._watch, args=(processes, name, on_exit), name=f"{name}-exit-watcher", daemon=True
        )
        self._thread.start()

    def _watch(self, processes: list[Any], name: str, on_exit: Callable[[WorkerError], None]) -> None:
        sentinels = {process.sentinel: (index, process) for index, process in enumerate(processes)}
        try:
            ready = wait([self._read, *sentinels])
            if self._read in ready or self._stopped:
                return
            index, process = sentinels[ready[0]]
            process.join(1.0)
            on_exit(exit_error(name, index, process))
        finally:
            os.close(self._read)

    def join(self, timeout: float) -> None:
        """Wait until it has reported an exit (or was stopped)."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(OSError):  # the watcher may have ended (and closed its end)
                os.write(self._write, b"x")
            os.close(self._write)
            if self._thread is not threading.current_thread():
                self._thread.join(5.0)


class Woken:
    """Posted as the awaited result once the workers are stopped: the run waiting for it ends."""


def wait_for_exit(processes: list[Any], deadline: float) -> list[Any]:
    """Wait until every process has exited or ``deadline`` (``time.monotonic()``) passes, all at once.

    Returns those still running. Never waits on an empty list of sentinels, which would sleep out
    the whole grace although nothing is left to wait for.
    """
    alive = [process for process in processes if process.exitcode is None]
    while alive:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        wait([process.sentinel for process in alive], remaining)
        alive = [process for process in alive if process.exitcode is None]
    return alive


def stop_workers(iterator: Any, grace: float, kill_grace: float) -> list[Any]:
    """End the worker processes of torch's multiprocess ``DataLoader`` iterator in bounded time.

    torch's own ``_shutdown_workers`` joins one worker after another, 5 s each, before it
    terminates any. Here the workers are asked to stop (torch's done event and index-queue
    sentinel), given ``grace`` seconds all together, then sent SIGTERM (torch's handler exits at
    once), and SIGKILL after ``kill_grace``; torch's clean-up (queues, pin-memory thread, SIGCHLD
    registration) then finds them gone. ``grace=0`` terminates at once. Returns the processes
    that had to be terminated; safe to call twice.
    """
    if getattr(iterator, "_shutdown", True):  # shut down already, or no worker processes
        return []
    processes = list(getattr(iterator, "_workers", ()))
    if grace > 0:
        with contextlib.suppress(Exception):  # a queue broken by a killed worker: terminate below
            iterator._workers_done_event.set()
            for worker_id in range(len(processes)):
                if iterator._persistent_workers or iterator._workers_status[worker_id]:
                    iterator._mark_worker_as_unavailable(worker_id, shutdown=True)
    terminated = wait_for_exit(processes, time.monotonic() + grace)
    if terminated:
        unregister_pids(iterator)  # torch's SIGCHLD handler would raise for a worker we kill
    for process in terminated:
        with contextlib.suppress(OSError):
            process.terminate()
    for process in wait_for_exit(terminated, time.monotonic() + kill_grace):
        with contextlib.suppress(OSError):
            process.kill()
    wait_for_exit(terminated, time.monotonic() + kill_grace)
    iterator._shutdown_workers()
    return terminated


def wake(iterator: Any) -> None:
    """End a run that another thread drives and that waits for a result now never coming.

    torch waits on its result queue and, every 5 s, re-checks only the workers it has not marked
    stopped; after a shutdown it would wait forever (a queue filled from a background thread and
    closed from the main one). The result it waits for wakes it. Written straight into the pipe:
    ``put`` would start a feeder thread that waits for the queue's lock, which a worker stopped
    while writing may hold. (With ``pin_memory`` torch notices its stopped pin thread itself.)
    """
    if not iterator._pin_memory and hasattr(iterator, "_worker_result_queue"):
        results = iterator._worker_result_queue
        message = ForkingPickler.dumps((iterator._rcvd_idx, Woken()))
        with contextlib.suppress(OSError):
            results._sem.acquire(False)  # as put() does: get() gives it back
            results._writer.send_bytes(message)


def exit_code(process: Any) -> int | None:
    """The exit code of a process that has exited, even while another thread reaps it.

    Two threads reaping one process race in waitpid (torch's ``is_alive()`` checks reap too): the
    loser reads no code, and the winner records it a moment later.
    """
    deadline = time.monotonic() + 1.0
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.001)
    code: int | None = process.exitcode
    return code


def exit_error(name: str, index: int, process: Any) -> WorkerError:
    return WorkerError(f"{name}: worker {index} (pid {process.pid}) {describe_exit(exit_code(process))}")


def out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` is a hand-over that failed because this process ran out of file descriptors.

    A tensor from a worker process arrives as a file descriptor; at the open-file limit the socket
    drops it and multiprocessing raises a bare ``received 0 items of ancdata`` (torch names the
    cause only when the limit is still reached after the failure).
    """
    text = str(error)
    return "ancdata" in text or "Too many open files" in text or getattr(error, "errno", None) == errno.EMFILE


def fd_limit_advice() -> str:
    """What to do when held batches use up the open-file limit, with this process's figures."""
    figures = ""
    with contextlib.suppress(Exception):  # no /proc or no resource module: say it without figures
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        figures = f" ({len(os.listdir('/proc/self/fd'))} open, limit {soft})"
    return (
        f"a batch from the worker processes was lost: this process ran out of file descriptors{figures}. "
        "Every tensor received from a worker process holds one open until it is freed, so holding many "
        "batches, or batches of many tensors, uses them up. Keep fewer batches alive, raise the limit "
        "(`ulimit -n 65536` in the shell, or resource.setrlimit(resource.RLIMIT_NOFILE, ...)), or call "
        "torch.multiprocessing.set_sharing_strategy('file_system') at the start of the program"
    )


def register_pids(iterator: Any) -> None:
    """Let torch's SIGCHLD handler raise for these workers; raise now for one that died meanwhile."""
    iterator._worker_pids_set = True  # first: if the handler raises after the next line, it is set
    signal_handling._set_worker_pids(id(iterator), tuple(w.pid for w in iterator._workers))  # type: ignore[attr-defined]  # private, stable since 1.0
    signal_handling._error_if_any_worker_fails()  # type: ignore[attr-defined]  # private, stable since 1.0


def unregister_pids(iterator: Any) -> None:
    if getattr(iterator, "_worker_pids_set", False):
        signal_handling._remove_worker_pids(id(iterator))  # type: ignore[attr-defined]  # private, stable since 1.0
        iterator._worker_pids_set = False


def unlink_segments_of(pid: int) -> None:
    """Remove shared-memory names a worker killed by a signal left behind.

    torch names a segment ``torch_<pid>_...`` and unlinks the name right after creating it, so a
    name that outlives its (dead) creator can only be one it was killed in the middle of making.
    """
    root = Path("/dev/shm")
    if root.is_dir():
        for path in root.glob(f"torch_{pid}_*"):
            with contextlib.suppress(OSError):
                path.unlink()
