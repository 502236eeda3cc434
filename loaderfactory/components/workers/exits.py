"""How worker processes end: stopping them in bounded time, watching for a death, exit codes.

Used by :mod:`~loaderfactory.components.workers.passes`; torch's private names are reached through
:mod:`~loaderfactory.components.workers.torch_internals` only.
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
from pathlib import Path
from typing import Any

from loaderfactory.components.workers.torch_internals import (
    ask_workers_to_stop,
    finish_shutdown,
    free_stop_signal,
    is_shut_down,
    let_go,
    post_result,
    unregister_pids,
    worker_processes,
)
from loaderfactory.errors import WorkerError

KILL_GRACE_S = 0.5
"""How long a process that was sent SIGTERM gets to exit before SIGKILL."""


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
    """A thread that waits on the exit sentinels of an iterator's workers and reports the first
    exit torch did not cause (torch marks its own shutdown before its workers exit, and a worker
    whose stream ended as unavailable before it exits)."""

    def __init__(self, iterator: Any, name: str, on_exit: Callable[[WorkerError], None]) -> None:
        self._read, self._write = os.pipe()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._watch, args=(iterator, name, on_exit), name=f"{name}-exit-watcher", daemon=True
        )
        self._thread.start()

    def _watch(self, iterator: Any, name: str, on_exit: Callable[[WorkerError], None]) -> None:
        processes = worker_processes(iterator)
        sentinels = {process.sentinel: (index, process) for index, process in enumerate(processes)}
        try:
            while sentinels:
                ready = wait([self._read, *sentinels])
                if self._read in ready or self._stopped or is_shut_down(iterator):
                    return
                index, process = sentinels.pop(ready[0])
                process.join(1.0)
                code = exit_code(process)
                if code == 0 and let_go(iterator, index):
                    continue  # its stream ended and torch let it go: watch the others
                if code is not None and code < 0:
                    free_stop_signal(iterator)
                on_exit(exit_error(name, index, process))
                return
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


def stop_workers(iterator: Any, grace: float, kill_grace: float, wake: bool = False) -> None:
    """End the worker processes of torch's multiprocess ``DataLoader`` iterator in bounded time.

    torch's own shutdown joins one worker after another, 5 s each, before it terminates any. Here
    the workers are asked to stop all at once, given ``grace`` seconds all together, then sent
    SIGTERM (torch's handler exits at once), and SIGKILL after ``kill_grace``; torch's clean-up
    then finds them gone. ``grace=0`` terminates at once. With ``wake``, a thread waiting inside
    ``next(iterator)`` gets :class:`Woken`. Shared-memory names a terminated worker may have left
    are removed. Safe to call twice.
    """
    if is_shut_down(iterator):  # shut down already, or no worker processes
        return
    processes = worker_processes(iterator)
    if any(killed(process) for process in processes):
        free_stop_signal(iterator)
    if grace > 0:
        with contextlib.suppress(Exception):  # a queue broken by a killed worker: terminate below
            ask_workers_to_stop(iterator)
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
    finish_shutdown(iterator)
    if wake:
        post_result(iterator, Woken())
    for process in processes:
        # A worker stopped by a signal may have been creating a shared-memory segment.
        if process in terminated or (process.exitcode is not None and process.exitcode < 0):
            unlink_segments_of(process.pid)


def killed(process: Any) -> bool:
    """Whether ``process`` has been ended by a signal (and may have left a shared lock taken)."""
    code = process.exitcode
    return code is not None and code < 0


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
