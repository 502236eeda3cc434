"""fsspec's event loop in a forked process (a DataLoader worker): marked stopped there.

fsspec runs every async filesystem (s3fs, gcsfs, HTTP) on one event loop, on a thread of the process
that made it. A forked child gets a copy of that loop, which still says it is running although no
thread runs it there. s3fs closes a filesystem it collects by running its session's exit on the
loop it was made on if that loop runs, waiting up to a second: in a worker, each filesystem the
parent made and no longer references (fsspec's instance cache, emptied in the child, or the
parent's garbage) then costs a second when collected. Marked stopped in the child, the loop makes
s3fs drop its copy of the connection at once; what aiohttp reports about it goes nowhere, as the
parent still holds and closes that connection.
"""

from __future__ import annotations

import asyncio
import os
import sys

_PARENT_LOOP: list[asyncio.AbstractEventLoop | None] = [None]


def _remember_loop() -> None:
    """Before a fork: fsspec's loop, if fsspec runs one (``fsspec.asyn.loop``; never imported here)."""
    asyn = sys.modules.get("fsspec.asyn")
    loops = getattr(asyn, "loop", None)
    _PARENT_LOOP[0] = loops[0] if isinstance(loops, list) and loops else None


def _stop_copied_loop() -> None:
    """In the child: the copied loop runs on no thread here; say so (asyncio's own marker), and
    let the parent's sessions dropped here go without "Unclosed client session" errors."""
    loop, _PARENT_LOOP[0] = _PARENT_LOOP[0], None
    if isinstance(loop, asyncio.BaseEventLoop) and loop.is_running():
        loop._thread_id = None  # type: ignore[attr-defined]  # what is_running() reads
        loop.set_exception_handler(_ignore)


def _ignore(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The copied loop's reports: about the parent's connections, which are the parent's to close."""


def _forget_loop() -> None:
    _PARENT_LOOP[0] = None


os.register_at_fork(before=_remember_loop, after_in_child=_stop_copied_loop, after_in_parent=_forget_loop)
