"""Steps that Ctrl-C should not cut in half: starting a pass's worker processes and its watcher.

A ``KeyboardInterrupt`` raised while torch forks the workers, or before the pass that watches them
exists, leaves a half-made iterator whose ``__del__`` prints a traceback, and workers nobody stops.
A SIGINT handler that can wait (the command's, :mod:`loaderfactory.hydra.interrupts`) asks
:func:`inside` and raises once the step is over; Python's own handler raises at once, as always.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

_steps: set[CodeType] = set()


def uninterruptible(function: F) -> F:
    """Mark ``function`` as a step :func:`inside` reports (it is not changed otherwise)."""
    _steps.add(function.__code__)
    return function


def inside(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it runs a step marked :func:`uninterruptible`."""
    while frame is not None:
        if frame.f_code in _steps:
            return True
        frame = frame.f_back
    return False
