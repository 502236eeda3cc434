"""Checks on processes shared by the worker-pool tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def orphans_after_parent_kill(code: str) -> list[int]:
    """Run ``code`` (which prints its worker pids), SIGKILL it; the workers still alive 5 s on."""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2, "the parent did not report its workers"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        parent.stdout.close()
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        return [pid for pid in pids if alive(pid)]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for pid in pids:
            if alive(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
