"""Closing components that own threads or processes, whatever their type, in bounded time.

Every ``close()`` first tells its threads and processes to stop, then waits for them within one
grace shared by all of them (:data:`STOP_GRACE_S`): a thread still inside its source after it is
left to finish as a daemon, with a ``RuntimeWarning``; a process still running is terminated.
:func:`stopping_together` shares that grace between the stages of a pipeline, so a stage's thread
blocked on the stage before it is released when that stage stops, instead of being waited for
first. Where an error is on its way to the consumer (``stopping_together(wait=False)``), nothing
is waited for: the error comes first. At interpreter exit, threads get one short grace for all of
them (:data:`EXIT_GRACE_S`), without a warning, and processes are terminated at once.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch.utils.data import DataLoader

from loaderfactory.components.workers.exits import KILL_GRACE_S as KILL_GRACE_S  # re-exported
from loaderfactory.components.workers.watched import stop_loader_workers

STOP_GRACE_S = 1.0
"""How long ``close()`` waits for a component's threads and processes, all of them together."""
EXIT_GRACE_S = 0.5
"""How long, at interpreter exit, the threads of components left running get (all of them together)
to leave their current item. A daemon thread still inside torch's native code (a matmul, a collate)
while the interpreter tears down aborts the process: "terminate called without an active exception"."""
_SETTLE_S = 0.1
"""What a thread released by the last stage to stop still gets, when the shared grace is over."""

_local = threading.local()
_exit_deadline: list[float] = []  # set by the first wait at exit, shared by all later ones


class _Handover:
    """The threads stopped inside one :func:`stopping_together` block, waited for on leaving it."""

    def __init__(self, wait: bool) -> None:
        self.wait = wait
        self.deadline = time.monotonic() + STOP_GRACE_S
        self.threads: list[tuple[threading.Thread, str]] = []


def exiting() -> bool:
    """Whether the interpreter is shutting down (``atexit`` handlers and finalizers are running).

    Python stops the main thread before it runs them, so ``main_thread().is_alive()`` turns false.
    """
    return sys.is_finalizing() or not threading.main_thread().is_alive()


def grace() -> float:
    """Seconds a ``close()`` may give its processes now: what is left of the shared grace inside
    :func:`stopping_together`, none on an error path or at exit."""
    handover: _Handover | None = getattr(_local, "handover", None)
    if exiting() or (handover is not None and not handover.wait):
        return 0.0
    if handover is not None:
        return max(0.0, handover.deadline - time.monotonic())
    return STOP_GRACE_S


@contextmanager
def stopping_together(wait: bool = True) -> Iterator[None]:
    """Close several components with one grace for all their threads.

    Inside, :func:`finish_threads` hands the threads over instead of joining them; on leaving,
    they are joined within the :data:`STOP_GRACE_S` that began on entering (a thread released
    by the last stage stopped still gets a moment to end). With ``wait=False`` (an error is being
    raised) they are not waited for at all, and processes are terminated at once. Nested blocks
    hand their threads to the outermost one.
    """
    if getattr(_local, "handover", None) is not None:
        yield
        return
    handover = _local.handover = _Handover(wait)
    try:
        yield
    finally:
        _local.handover = None
        if exiting():
            _join_at_exit(handover.threads)
        elif handover.wait:
            _join(handover.threads, max(handover.deadline, time.monotonic() + _SETTLE_S))


def finish_threads(threads: Sequence[threading.Thread], what: str) -> None:
    """Wait for ``threads``, already told to stop, within one :data:`STOP_GRACE_S` for all of them.

    A thread still alive after it is left to finish on its own (the threads are daemons), with a
    ``RuntimeWarning`` naming ``what``. Not waited for inside ``stopping_together(wait=False)``;
    handed to the enclosing :func:`stopping_together` otherwise; at exit, see :data:`EXIT_GRACE_S`.
    """
    current = threading.current_thread()
    named = [(thread, what) for thread in threads if thread is not current and thread.is_alive()]
    if not named:
        return
    handover: _Handover | None = getattr(_local, "handover", None)
    if handover is not None:
        handover.threads.extend(named)
    elif exiting():
        _join_at_exit(named)
    else:
        _join(named, time.monotonic() + STOP_GRACE_S)


def _join_at_exit(named: list[tuple[threading.Thread, str]]) -> None:
    """Wait for ``named`` until one deadline shared by every wait at exit; a stuck thread is left."""
    if not _exit_deadline:
        _exit_deadline.append(time.monotonic() + EXIT_GRACE_S)
    for thread, _ in named:
        thread.join(max(0.0, _exit_deadline[0] - time.monotonic()))


def _join(named: list[tuple[threading.Thread, str]], deadline: float) -> None:
    for thread, _ in named:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sorted({what for thread, what in named if thread.is_alive()})
    if stuck:
        warnings.warn(
            f"{', '.join(stuck)}: a thread is still inside its source or dataset {STOP_GRACE_S:g} s "
            "after close(); it is left to finish its current item as a daemon thread",
            RuntimeWarning,
            stacklevel=4,
        )


def close_component(component: Any) -> None:
    """Release what ``component`` holds: call its ``close()``, or shut down a DataLoader's workers."""
    close = getattr(component, "close", None)
    if callable(close):
        close()
    if isinstance(component, DataLoader):
        stop_loader_workers(component, grace())
