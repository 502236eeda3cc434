"""Checks on processes shared by the worker-pool tests, and the room a time bound gets on a busy machine."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_survivors(pids: list[int]) -> None:
    """SIGKILL those of ``pids`` still alive (a failed test's orphans)."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


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
        kill_survivors(pids)


# -- what the leak check counts as ours ----------------------------------------------------------

SHM = Path("/dev/shm")
_TORCH_NAME = re.compile(r"torch_(\d+)_")
SIGNALLED: set[int] = set()
"""Pids this process sent a signal to (tests kill workers; ``close()`` SIGKILLs stuck ones)."""


def _record_signalled(event: str, args: tuple[object, ...]) -> None:
    if event == "os.kill" and isinstance(args[0], int):
        SIGNALLED.add(args[0])


def watch_signals() -> None:
    """Record every pid this process signals, through the ``os.kill`` audit event (cheap: a set add)."""
    sys.addaudithook(_record_signalled)


def tree_pids() -> set[int]:
    """This process and its live descendants."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(child.pid for child in psutil.Process().children(recursive=True))
    return pids


def shm_names() -> set[str]:
    """Every name in ``/dev/shm`` now, whoever made it."""
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def _shm_held_by(pid: int) -> set[str]:
    """The ``/dev/shm`` names ``pid`` has mapped (``/proc/<pid>/maps``) or open (``/proc/<pid>/fd``)."""
    paths: list[str] = []
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
        paths.extend(fields[5] for line in maps if len(fields := line.split(maxsplit=5)) == 6)
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    prefix = f"{SHM}/"
    return {path.strip()[len(prefix) :] for path in paths if path.startswith(prefix)}


def segments_of_tree(names: set[str], pids: set[int]) -> set[str]:
    """Which of ``names`` (new in ``/dev/shm``) the process tree ``pids`` made or holds.

    ``/dev/shm`` is shared by every process of the machine and records no creator, so a name counts
    as ours when a process of ours still has it mapped or open (a leaked ``SharedMemory`` or
    semaphore is, until it is closed), or when torch's name ``torch_<pid>_...`` names one of ours
    (a worker killed while making it leaves it behind, with no process holding it). Names other
    processes on the machine make or hold (a parallel test run's semaphores) never count. Not seen:
    a name one of ours made, closed and forgot to unlink, when the name carries no pid of ours.

    ``pids`` is the tree as the leak check knows it: this process, its descendants at the test's
    start and end, and every pid it signalled meanwhile (a worker it killed is gone by now).
    Reading ``/proc`` happens only when a name is new, so a clean test pays one ``listdir``.
    """
    if not names:
        return set()
    held = set().union(*(_shm_held_by(pid) for pid in pids))
    ours = set()
    for name in names:
        torch_name = _TORCH_NAME.match(name)
        if name in held or (torch_name and int(torch_name.group(1)) in pids):
            ours.add(name)
    return ours


def allowance(startup_s: float) -> float:
    """Room for a loaded machine on top of a bound: twice what starting the component took in the same test.

    Idle, starting takes tens of milliseconds and the bounds stay the README's; on a busy shared
    machine starting and stopping slow down alike, so a bound still tells waiting out a grace or a
    stuck producer (60 s) from a slow scheduler.
    """
    return 2 * startup_s
