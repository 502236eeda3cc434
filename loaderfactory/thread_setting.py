"""A value a thread sets for the code it calls inside a ``with`` block, and no other thread sees."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class ThreadSetting(Generic[T]):
    """Per thread: ``None`` until :meth:`given` sets it for a block (blocks nest)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> T | None:
        value: T | None = getattr(self._local, "value", None)
        return value

    def given(self, value: T) -> _Given[T]:
        """``value`` for this thread inside the block; what it was before, after."""
        return _Given(self._local, value)


class _Given(Generic[T]):
    """:meth:`ThreadSetting.given`'s block (a class: it runs on every read of a mixture's source)."""

    __slots__ = ("_local", "_previous", "_value")

    def __init__(self, local: threading.local, value: T) -> None:
        self._local = local
        self._value = value
        self._previous: T | None = None

    def __enter__(self) -> None:
        self._previous = getattr(self._local, "value", None)
        self._local.value = self._value

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._local.value = self._previous
