"""Ctrl-C held by the command for a step it should not cut: held a moment at most, and a second
press stops the command at once (the handler of :mod:`loaderfactory.hydra.interrupts`, in a small
script: a step waiting on workers' tasks in flight is minutes long only where a fetch hangs)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time

from tests.test_cli import ROOT
from tests.test_fault_injection import allowance

HELD_STEP = """
import signal, sys, threading, time

from loaderfactory.components.workers.uninterruptible import uninterruptible
from loaderfactory.hydra import interrupts

if sys.argv[1] != "default":
    interrupts.HOLD_S = float(sys.argv[1])
interrupts.interrupt_once()
handler = signal.getsignal(signal.SIGINT)
held = []


def traced(signum, frame):
    handler(signum, frame)  # it returned: the press is held
    if not held:
        held.append(time.monotonic())
        print("held", flush=True)


signal.signal(signal.SIGINT, traced)


@uninterruptible
def step():  # a pass starting while a worker's fetch hangs: torch waits for the tasks in flight
    print("in step", flush=True)
    threading.Event().wait(60)


try:
    step()
except KeyboardInterrupt:
    print(f"interrupted {time.monotonic() - held[0]:.3f} s after the press was held", flush=True)
    sys.exit(130)
"""
"""Ctrl-C's handler installed as the command installs it, then a marked step that lasts 60 s."""


def _start(hold: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", HELD_STEP, hold],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _read_until(process: subprocess.Popen[bytes], marker: bytes, timeout: float = 60.0) -> bytes:
    """stdout until ``marker``; fails past ``timeout`` or if the process ends first."""
    assert process.stdout is not None
    seen, deadline = b"", time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while marker not in seen:
            left = deadline - time.monotonic()
            assert left > 0 and selector.select(left), f"no {marker!r} in {timeout} s: {seen!r}"
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"the script ended first: {seen!r} {process.communicate()[1].decode()[-3000:]}"
            seen += chunk
    return seen


def _finish(process: subprocess.Popen[bytes], timeout: float) -> tuple[str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return out.decode(), err.decode()


def test_a_second_ctrl_c_while_the_first_is_held_stops_at_once() -> None:
    """A press held for a marked step (the hold made longer than the step, 60 s), then a second
    press: the command stops at once, with one line and status 130 (the second was absorbed too,
    and the command ran on until the step ended)."""
    process = _start("600")
    try:
        _read_until(process, b"in step")
        process.send_signal(signal.SIGINT)
        _read_until(process, b"held")
        process.send_signal(signal.SIGINT)
    finally:
        out, err = _finish(process, timeout=20)
    assert process.returncode == 130, (out, err)
    assert err == "loaderfactory: interrupted again: stopped at once, without a report\n", err
    assert "interrupted " not in out, out


def test_a_ctrl_c_held_for_a_step_that_waits_on_others_is_raised_after_the_hold() -> None:
    """One press in a marked step that lasts 60 s: ``KeyboardInterrupt`` comes :data:`HOLD_S` later
    (plus a retry), not when the step ends."""
    from loaderfactory.hydra.interrupts import HOLD_S, RETRY_S

    began = time.monotonic()
    process = _start("default")
    try:
        _read_until(process, b"in step")
        startup = time.monotonic() - began
        process.send_signal(signal.SIGINT)
        _read_until(process, b"held")
        out = _read_until(process, b"after the press was held", timeout=HOLD_S + 30)
    finally:
        rest, err = _finish(process, timeout=20)
    assert process.returncode == 130, (out, rest, err)
    seconds = float(out.decode().split("interrupted ")[1].split(" s ")[0])
    assert HOLD_S - RETRY_S <= seconds < HOLD_S + RETRY_S + 0.5 + allowance(startup), seconds
    assert err == "", err
