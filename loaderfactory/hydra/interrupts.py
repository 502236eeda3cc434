"""Ctrl-C in the command: one ``KeyboardInterrupt``, raised where it cannot be lost or leave a lock held.

Python raises ``KeyboardInterrupt`` at whatever line the main thread is running. Three places there
turned a Ctrl-C as the first workers start into a hang or a traceback:

- inside logging's module lock (taken, then ``try:``): the lock stayed held, and the next
  ``logging.getLogger`` on another thread (torch's DataLoader, importing its profiler to draw the
  first batch) waited for it forever;
- inside a ``__del__``, where Python prints the exception as "ignored" and drops it: the run went
  on as if nothing was pressed;
- while a pass's worker processes start (torch's ``_MultiProcessingDataLoaderIter.__init__``, and
  the steps :mod:`~loaderfactory.components.workers.uninterruptible` marks): the half-made
  iterator's ``__del__`` printed an ``AttributeError`` traceback.

There the handler raises nothing and asks again a moment later (:data:`RETRY_S`), by sending this
process SIGINT from a timer thread, until the main thread is somewhere else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from loaderfactory.hydra.exits import INTERRUPTED_EXIT

if TYPE_CHECKING:
    from types import FrameType

RETRY_S = 0.02
"""How soon an interrupt that arrived in one of those places is raised again."""
_NOT_HERE = (("torch/utils/data/dataloader.py", "__init__"),)
"""(file ending, function) where a ``KeyboardInterrupt`` is not raised, besides any ``__del__``."""


def interrupt_once() -> None:
    """Install the command's SIGINT handler (main thread): the first Ctrl-C raises
    ``KeyboardInterrupt`` where it is safe (see the module); a second one, while the first is
    being handled (workers closing, the partial report being written), ends the process at once
    with one line and status 130, rather than a second traceback from wherever it lands."""
    if sys.platform == "win32" or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return  # a background job started with Ctrl-C ignored keeps it so
    command = os.getpid()

    def first(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != command:  # a forked worker, which inherits this handler: torch's to stop
            raise KeyboardInterrupt
        if not safe_to_raise(frame):
            retry = threading.Timer(RETRY_S, os.kill, (command, signal.SIGINT))
            retry.daemon = True
            retry.start()
            return
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    def again(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != command:
            raise KeyboardInterrupt
        with contextlib.suppress(OSError):
            os.write(2, b"loaderfactory: interrupted again: stopped at once, without a report\n")
        os._exit(INTERRUPTED_EXIT)

    signal.signal(signal.SIGINT, first)


def safe_to_raise(frame: FrameType | None) -> bool:
    """Whether a ``KeyboardInterrupt`` raised in ``frame`` (the main thread's) reaches the command
    and leaves logging's lock free."""
    logging = sys.modules.get("logging")
    lock = getattr(logging, "_lock", None)
    if lock is not None and lock._is_owned():
        return False
    steps = sys.modules.get("loaderfactory.components.workers.uninterruptible")
    if steps is not None and steps.inside(frame):
        return False
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__":
            return False
        if any(code.co_filename.endswith(path) and code.co_name == name for path, name in _NOT_HERE):
            return False
        frame = frame.f_back
    return True
