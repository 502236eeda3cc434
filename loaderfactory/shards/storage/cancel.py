"""Cancelling remote requests that are waiting: a hung server must not hold ``close()``.

A :class:`Cancel` is a ``threading.Event`` that also runs callbacks when it is set: a request in
flight registers one that stops it at once (an fsspec call's task cancelled on its event loop, a
socket shut down under a blocked read), where checking the event between pieces would wait for the
server's read timeout (60 s) first. :func:`cancelled_by` makes a Cancel the one every
:class:`~loaderfactory.shards.storage.store.Storage` request of the calling thread obeys, so a caller
cancels a whole fetch (its size request, its ranges, its retries' backoff) without passing it down.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from loaderfactory.thread_setting import ThreadSetting

_CURRENT: ThreadSetting[threading.Event] = ThreadSetting()


class Cancel(threading.Event):
    """An event whose :meth:`set` also runs the callbacks registered with :meth:`on_set`."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next = 0
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        with self._callbacks_lock:
            super().set()
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            callback()

    @contextlib.contextmanager
    def on_set(self, callback: Callable[[], object]) -> Iterator[None]:
        """Run ``callback`` when this is set (at once if it is already) while inside the block."""
        with self._callbacks_lock:
            already = self.is_set()
            key, self._next = self._next, self._next + 1
            if not already:
                self._callbacks[key] = callback
        if already:
            callback()
        try:
            yield
        finally:
            with self._callbacks_lock:
                self._callbacks.pop(key, None)


def cancelled_by(cancel: threading.Event) -> contextlib.AbstractContextManager[None]:
    """Make ``cancel`` stop the storage requests this thread makes inside the block."""
    return _CURRENT.given(cancel)


def current(explicit: threading.Event | None = None) -> threading.Event | None:
    """``explicit`` if given, else the event this thread's requests obey (:func:`cancelled_by`)."""
    return explicit if explicit is not None else _CURRENT.get()


@contextlib.contextmanager
def stopping(cancel: threading.Event | None, stop: Callable[[], object]) -> Iterator[None]:
    """Run ``stop`` if ``cancel`` is set while inside the block (a plain Event: never, as before)."""
    if isinstance(cancel, Cancel):
        with cancel.on_set(stop):
            yield
    else:
        yield
