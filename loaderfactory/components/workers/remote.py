"""Exceptions that cross from a worker process to the consumer, keeping their type and traceback.

A worker catches whatever its task raises (``SystemExit`` and ``KeyboardInterrupt`` too) and returns
it as a :class:`RemoteFailure` instead of a result; the consumer calls :meth:`RemoteFailure.rebuild`
and raises that. The exception travels pickled where it can; otherwise its type is re-created from
its message, and failing that it becomes a :class:`~loaderfactory.errors.WorkerError`. Either way
the worker's formatted traceback is its ``__cause__``.
"""

from __future__ import annotations

import pickle
import traceback

from loaderfactory.errors import WorkerError


class WorkerTraceback(Exception):
    """The worker's formatted traceback, attached as ``__cause__`` of the re-raised exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class RemoteFailure:
    """An exception raised in a worker process, packed to cross into the consumer.

    Args:
        error: what the task raised.
        where: who raised it, for the note on the rebuilt exception (``"worker 1 (pid 4242)"``).
    """

    def __init__(self, error: BaseException, where: str) -> None:
        self.where = where
        self.text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.message = str(error)
        self.whole: bytes | None
        self.kind: bytes | None
        try:
            self.whole = pickle.dumps(error)
            pickle.loads(self.whole)
        except Exception:  # noqa: BLE001 - an unpicklable exception travels as its type and message
            self.whole = None
        try:
            self.kind = pickle.dumps(type(error))
        except Exception:  # noqa: BLE001 - a local class: the consumer raises a WorkerError instead
            self.kind = None

    def rebuild(self, note: str | None = None) -> BaseException:
        """The worker's exception, of its own type where possible, its traceback as ``__cause__``."""
        error: BaseException | None = None
        if self.whole is not None:
            error = pickle.loads(self.whole)
        elif self.kind is not None:
            try:
                error = pickle.loads(self.kind)(self.message)
            except Exception:  # noqa: BLE001 - the type takes other arguments: fall back below
                error = None
        if error is None:
            error = WorkerError(
                f"{self.where} raised an exception that cannot be re-created here: {self.message}"
            )
        error.__cause__ = WorkerTraceback(f"\n\n{self.where} raised:\n{self.text}")
        error.add_note(note or f"raised in {self.where}")
        return error
