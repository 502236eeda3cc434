"""Helpers for worker processes: noticing that the parent died."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection, wait
from typing import Any

PARENT_CHECK_S = 0.5
"""How often an idle worker checks that its parent is alive (when it has no parent sentinel)."""


def wait_for_parent(conn: Connection, parent_pid: int) -> bool:
    """Wait until ``conn`` has something to read: ``True``; ``False`` once the parent process is gone.

    Watches the parent's sentinel where ``multiprocessing`` gives one, and checks every
    ``PARENT_CHECK_S`` that the process is still the child of ``parent_pid`` (an orphan is
    adopted by another process), so a parent killed by a signal never leaves its workers behind.
    """
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    watched: list[Any] = [conn] if sentinel is None else [conn, sentinel]
    while True:
        ready = wait(watched, PARENT_CHECK_S)
        if conn in ready:
            return True
        if ready or os.getppid() != parent_pid:
            return False
