"""Steps that Ctrl-C should not cut in half: starting a pass's worker processes, and closing.

A ``KeyboardInterrupt`` raised while torch forks the workers, or before the pass that watches them
exists, leaves a half-made iterator whose ``__del__`` prints a traceback, and workers nobody stops;
one raised inside a ``close()`` leaves the rest of it undone (a download pool's queue, run to its
end at exit). A SIGINT handler that can wait (the command's, in its ``interrupts`` module)
asks :func:`held_in` and raises once the step is over; Python's own handler raises at once, as always.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


class Hold(enum.Enum):
    """How long a waiting handler holds Ctrl-C for a step."""

    A_MOMENT = "a moment"
    """A step that may wait on others (the workers' tasks in flight): held a moment, then raised anyway."""
    TO_ITS_END = "to its end"
    """A step bounded by its own grace (a ``close()``): held until it returns."""


_steps: dict[CodeType, Hold] = {}


def uninterruptible(function: F) -> F:
    """Mark ``function`` as a step held :attr:`Hold.A_MOMENT` (it is not changed otherwise)."""
    _steps[function.__code__] = Hold.A_MOMENT
    return function


def runs_to_its_end(function: F) -> F:
    """Mark ``function``, which ends in bounded time by itself, as a step held :attr:`Hold.TO_ITS_END`."""
    _steps[function.__code__] = Hold.TO_ITS_END
    return function


def held_in(frame: FrameType | None) -> Hold | None:
    """How ``frame``, or the steps it runs inside, hold Ctrl-C (the longest); None: not at all."""
    found = None
    while frame is not None:
        hold = _steps.get(frame.f_code)
        if hold is Hold.TO_ITS_END:
            return hold
        found = found or hold
        frame = frame.f_back
    return found


def inside(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it runs a marked step."""
    return held_in(frame) is not None
