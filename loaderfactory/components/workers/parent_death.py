"""A worker process exits within moments of its parent's death, whatever it is blocked on.

torch's workers check their parent only between tasks, every 5 s, and then leave their loop the
normal way: Python's exit joins the result queue's feeder thread, which waits forever to write a
batch into a pipe nobody reads (a batch sent by value, bigger than the 64 KiB pipe buffer and under
:data:`~loaderfactory.components.workers.batch_transfer.BY_VALUE_BYTES`). Such a worker kept the
dead trainer's stdout and its cache shards open for good. So every worker process started through
:mod:`~loaderfactory.components.workers.watched` runs :class:`ExitWithParent` first:

- on Linux, where the workers were started by the parent's main thread, the kernel sends it SIGKILL
  when the parent dies (``prctl(PR_SET_PDEATHSIG)``), whatever the worker is doing, even inside native
  code holding the GIL. Not for workers started on another thread (``ThreadDataLoader``'s producer):
  the kernel sends the signal when the *thread* that started the process ends;
- everywhere, a daemon thread waits on the parent's sentinel and checks the parent pid, and ends the
  worker with ``os._exit`` (no finalizer, so no feeder thread is joined) when the parent is gone.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported for its type only: `loaderfactory s3-server` uses this module without torch
    from torch.utils.data import DataLoader

PARENT_CHECK_S = 0.5
"""How often a worker checks its parent's pid (besides waiting on the parent's sentinel)."""
PR_SET_PDEATHSIG = 1
"""Linux's ``prctl`` option (``linux/prctl.h``): the signal this process gets when its parent dies."""
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
"""Looked up once, here: :func:`kill_with_parent` runs in a forked child before ``exec``, where a
``dlopen`` could wait forever on a lock another thread of the parent held at the fork."""


class ExitWithParent:
    """``worker_init_fn`` that first ties the worker's life to its parent's, then calls ``init``.

    Made in the parent as the workers start: ``parent_pid`` is the parent's pid, ``on_main_thread``
    whether the parent's main thread starts them (the kernel's death signal is tied to that thread).
    """

    def __init__(self, init: Callable[[int], None] | None, parent_pid: int, on_main_thread: bool) -> None:
        self.init = init
        self.parent_pid = parent_pid
        self.on_main_thread = on_main_thread

    def __call__(self, worker_id: int) -> None:
        exit_with_parent(self.parent_pid, self.on_main_thread)
        if self.init is not None:
            self.init(worker_id)


def exit_with_parent(parent_pid: int, on_main_thread: bool) -> None:
    """Make this process exit when ``parent_pid`` dies (see the module); at once if it already has.

    With ``fork`` and ``spawn`` the parent is this process's own; with ``forkserver`` the OS parent
    is the fork server, and the parent's sentinel tells.
    """
    if os.getppid() == parent_pid and on_main_thread:
        kill_with_parent(parent_pid)
    watched = os.getppid()
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    threading.Thread(target=_watch, args=(watched, sentinel), name="exit-with-parent", daemon=True).start()


def kill_with_parent(parent_pid: int) -> None:
    """On Linux, have the kernel SIGKILL this process when ``parent_pid``, its parent, dies (strictly:
    when the parent's thread that started it ends); exit at once if the parent is already gone.

    Safe as a ``subprocess`` ``preexec_fn`` (``loaderfactory s3-server`` ties ``weed`` to itself so):
    it calls no ``dlopen`` and takes no lock. Elsewhere it does nothing.
    """
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # died before the signal was asked for
        os._exit(0)


def _watch(watched: int, sentinel: int | None) -> None:
    """Return never: ``os._exit(0)`` once ``watched`` is no longer the parent or ``sentinel`` is ready.

    The sentinel of a ``fork`` worker is also held by workers forked after it, so it tells only once
    they are gone too; the pid check does not wait for them.
    """
    while True:
        if sentinel is not None:
            if wait([sentinel], PARENT_CHECK_S):
                break
        else:
            threading.Event().wait(PARENT_CHECK_S)
        if os.getppid() != watched:
            break
    os._exit(0)


@contextmanager
def workers_exit_with_parent(loader: DataLoader[Any]) -> Iterator[None]:
    """While torch starts ``loader``'s pass (its iterator reads ``worker_init_fn`` then), its worker
    processes run :class:`ExitWithParent` first; ``loader.worker_init_fn`` stays the user's."""
    init = loader.worker_init_fn
    if loader.num_workers == 0 or isinstance(init, ExitWithParent):
        yield
        return
    on_main_thread = threading.current_thread() is threading.main_thread()
    loader.worker_init_fn = ExitWithParent(init, os.getpid(), on_main_thread)
    try:
        yield
    finally:
        loader.worker_init_fn = init
