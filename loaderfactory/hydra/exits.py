"""How the command ends when it is stopped from outside: Ctrl-C, or its output's reader gone.

A few standard modules only: the command's entry point imports it before anything slow, so that
these endings read the same at any moment, even while Hydra, pydantic or torch are being imported.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

INTERRUPTED_EXIT = 130
"""The exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it."""
OUTPUT_CLOSED_EXIT = 141
"""The exit status when stdout's reader went away (128 + SIGPIPE), as Unix tools end then."""


class Interrupted(SystemExit):
    """Ctrl-C stopped a run; its partial report is written. Exits the command with status 130.

    A ``SystemExit``, so that Hydra passes it through instead of reporting a failed job.
    """

    def __init__(self, batches: int, report: Path) -> None:
        super().__init__(INTERRUPTED_EXIT)
        self.batches, self.report = batches, report


_modes: list[str] = []
"""The ``run.mode`` of each job begun in this process (Hydra had made its output folder by then)."""


def job_began(mode: str) -> None:
    _modes.append(mode)


def interrupted_line() -> str:
    """What Ctrl-C outside a run's job did: the line the command ends with."""
    if not _modes:
        return "loaderfactory: interrupted while starting, before the run had an output folder: no report"
    return f"loaderfactory: interrupted during run.mode={_modes[-1]}, which writes no report"


class OutputClosed(SystemExit):
    """stdout's reader went away (``loaderfactory --help | head -1``): end quietly with status 141."""

    def __init__(self) -> None:
        super().__init__(OUTPUT_CLOSED_EXIT)


def quiet_exit() -> None:
    """No INFO lines from ``atexit`` handlers once the command is stopped.

    Ctrl-C in the middle of ``import torch`` leaves torch's loggers unconfigured (no level, no
    handler of their own) while ``torch._subclasses.fake_tensor`` has registered its ``atexit``
    report: under Hydra's root logger (INFO, to stdout) it printed "FakeTensor cache stats" lines.
    """
    import logging

    logging.disable(logging.INFO)


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (what a ``BrokenPipeError`` meant)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no stdout
        return False
    return any(mask & select.POLLERR for _, mask in events)


class GuardedStdout:
    """``sys.stdout`` whose writes raise :class:`OutputClosed` once its reader is gone: a
    ``SystemExit``, which Hydra's error reporting (``--cfg``, ``--help``, a job) lets through."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            written: int = self._stream.write(text)
        except BrokenPipeError:
            raise self._closed() from None
        return written

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise self._closed() from None

    def _closed(self) -> BaseException:
        if not stdout_closed():
            return BrokenPipeError("stdout: broken pipe")
        drop_stdout()
        return OutputClosed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def drop_stdout() -> None:
    """Point stdout at the null device, so that flushing it at exit raises no second ``BrokenPipeError``."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
