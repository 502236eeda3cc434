"""Ctrl-C in the command: one ``KeyboardInterrupt``, raised where it cannot be lost or leave a lock held.

Python raises ``KeyboardInterrupt`` at whatever line the main thread is running. Four places there
turned a Ctrl-C into a hang or a traceback:

- inside logging's module lock (taken, then ``try:``): the lock stayed held, and the next
  ``logging.getLogger`` on another thread (torch's DataLoader, importing its profiler to draw the
  first batch) waited for it forever;
- inside a ``__del__``, where Python prints the exception as "ignored" and drops it: the run went
  on as if nothing was pressed;
- while a pass's worker processes start (torch's ``_MultiProcessingDataLoaderIter.__init__``, and
  the steps :mod:`~loaderfactory.components.workers.uninterruptible` marks): the half-made
  iterator's ``__del__`` printed an ``AttributeError`` traceback;
- inside a ``close()``: the rest of it was skipped, and a download pool left unclosed ran its whole
  queue as the process exited.

There the handler raises nothing and looks again a moment later (:data:`RETRY_S`), by sending the
main thread SIGINT from a timer thread, until the main thread is somewhere else; a step that may
wait on others (a new pass of persistent workers waits for their tasks in flight, one of them
maybe a fetch hung on a server) is held :data:`HOLD_S` at most, then interrupted anyway. A real
Ctrl-C while one is held is the second one: it stops the command at once. The timer says which
SIGINT is its own, so presses are never taken for retries (a press that lands in the very instant
of a retry is merged with it, as two presses are).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from loaderfactory.hydra.exits import INTERRUPTED_EXIT

if TYPE_CHECKING:
    from types import FrameType

RETRY_S = 0.02
"""How soon a held interrupt is looked at again."""
HOLD_S = 2.0
"""The longest a Ctrl-C is held for a step that may wait on others (a new pass waiting for the
persistent workers' tasks in flight)."""
_TO_ITS_END = (("torch/utils/data/dataloader.py", "__init__"),)
"""(file ending, function) held to its end: a pass's iterator being made forks its workers and
hands them their first indices, waiting for none of their tasks."""


_held_since: list[float] = []
"""When the press being held came (empty: none is)."""
_command: list[int] = []
_retry_sent = threading.Event()
"""Set by the retry timer just before it sends its SIGINT: that signal is no new press."""
"""The command's process id (a forked worker inherits the handlers)."""


def interrupt_once() -> None:
    """Install the command's SIGINT handler (main thread): the first Ctrl-C raises
    ``KeyboardInterrupt`` where it is safe (see the module); a second one, while the first is
    held or being handled (workers closing, the partial report being written), ends the process
    at once with one line and status 130, rather than a second traceback from wherever it lands."""
    if sys.platform == "win32" or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return  # a background job started with Ctrl-C ignored keeps it so
    _command[:] = [os.getpid()]
    main = threading.main_thread().ident

    def retry() -> None:
        _retry_sent.set()
        with contextlib.suppress(OSError):  # the process is ending
            signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]  # the main thread has an ident

    def first(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != _command[0]:  # a forked worker, which inherits this handler: torch's to stop
            raise KeyboardInterrupt
        is_retry = _retry_sent.is_set()
        _retry_sent.clear()
        if _held_since and not is_retry:
            _again(signum, frame)
        if not _held_since:
            _held_since.append(time.monotonic())
        if time.monotonic() - _held_since[0] < hold_for(frame):
            timer = threading.Timer(RETRY_S, retry)
            timer.daemon = True
            timer.start()
            return
        _raise()

    signal.signal(signal.SIGINT, first)


def raise_held() -> None:
    """Raise the Ctrl-C still held as the command's work ends (it came during the last close), so
    that the command ends as interrupted, not as if nothing was pressed."""
    if _held_since:
        _raise()


def _raise() -> None:
    _held_since.clear()
    signal.signal(signal.SIGINT, _again)
    raise KeyboardInterrupt


def _again(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _command[0]:
        raise KeyboardInterrupt
    if _retry_sent.is_set():  # the timer's look again, landing after the held press was raised
        _retry_sent.clear()
        return
    with contextlib.suppress(OSError):
        os.write(2, b"loaderfactory: interrupted again: stopped at once, without a report\n")
    os._exit(INTERRUPTED_EXIT)


def hold_for(frame: FrameType | None) -> float:
    """How long a Ctrl-C is held with the main thread at ``frame``: 0 where a ``KeyboardInterrupt``
    raised there reaches the command and leaves logging's lock free; forever where raising would
    hang or be lost (logging's lock, a ``__del__``) or cut a step bounded by itself (a close, a
    pass's iterator being made); :data:`HOLD_S` in a step that may wait on others."""
    logging = sys.modules.get("logging")
    lock = getattr(logging, "_lock", None)
    if lock is not None and lock._is_owned():
        return math.inf
    steps = sys.modules.get("loaderfactory.components.workers.uninterruptible")
    hold = None
    if steps is not None:  # imported with the workers: none can run before
        hold = steps.held_in(frame)
        if hold is steps.Hold.TO_ITS_END:
            return math.inf
    held = 0.0 if hold is None else HOLD_S
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__":
            return math.inf
        if any(code.co_filename.endswith(path) and code.co_name == name for path, name in _TO_ITS_END):
            return math.inf
        frame = frame.f_back
    return held
