"""A value a thread sets for the code it calls inside a ``with`` block, and no other thread sees."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class ThreadSetting(Generic[T]):
    """Per thread: ``None`` until :meth:`given` sets it for a block (blocks nest)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> T | None:
        value: T | None = getattr(self._local, "value", None)
        return value

    @contextmanager
    def given(self, value: T) -> Iterator[None]:
        """``value`` for this thread inside the block; what it was before, after."""
        previous = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = previous
