"""A command started as a terminal starts it, and its output read up to a marker with a deadline."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from cli_forks import ROOT


def start_command(
    command: list[str], folder: Path | None = None, stdin: bool = False
) -> subprocess.Popen[bytes]:
    """``command`` started in ``folder`` with this checkout importable, its output (and ``stdin``
    when asked) piped, SIGINT handled as in a terminal (a shell without job control starts background
    jobs with it ignored)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def read_until(stream: int, seen_enough: Callable[[bytes], bool], what: str, timeout: float) -> bytes:
    """What ``stream`` gives until ``seen_enough`` of it; fails past ``timeout`` (naming ``what`` was
    awaited) or when the stream ends first."""
    seen, deadline = b"", time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while not seen_enough(seen):
            left = deadline - time.monotonic()
            assert left > 0 and selector.select(left), f"no {what} in {timeout} s: {seen[-3000:]!r}"
            chunk = os.read(stream, 65536)
            assert chunk, f"the process ended before {what}: {seen[-3000:]!r}"
            seen += chunk
    return seen


def finish(process: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """The process's remaining stdout and stderr once it ends; killed past ``timeout`` (which fails)."""
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
