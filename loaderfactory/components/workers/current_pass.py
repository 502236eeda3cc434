"""The one running pass of a re-iterable component, started and closed under one lock.

A pass starts its threads or worker processes while it is being made. ``close()`` from another
thread (a ``Loader`` closed while its consumer thread is starting an epoch) must either find that
pass or come before it starts: never look while it is half made, see nothing, and leave it running.
The slot holds the pass weakly, so a pass abandoned by an early ``break`` is still collected at once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Closeable(Protocol):
    def close(self) -> None: ...


P = TypeVar("P", bound=Closeable)


class CurrentPass(Generic[P]):
    """Holds the running pass; :meth:`start` and :meth:`close` exclude each other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ref: weakref.ref[P] | None = None

    def start(self, make: Callable[[], P]) -> P:
        """Close the running pass, then make the next one with ``make()`` and hold it."""
        with self._lock:
            self._close_held()
            current = make()
            self._ref = weakref.ref(current)
        return current

    def get(self) -> P | None:
        """The running pass, or ``None`` when there is none (or it was collected)."""
        ref = self._ref
        return ref() if ref is not None else None

    def close(self) -> None:
        """Close the running pass, waiting for one being made; safe to call twice."""
        with self._lock:
            self._close_held()

    def __getstate__(self) -> dict[str, object]:
        return {}  # a copy (a spawned worker's) has no running pass

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__()  # type: ignore[misc]  # a fresh, empty slot

    def _close_held(self) -> None:
        current = self.get()
        self._ref = None
        if current is not None:
            current.close()
