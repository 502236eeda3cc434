"""Exceptions raised by loaderfactory.

Each subclasses the built-in that existing ``except`` clauses already expect: a config mistake is a
``ValueError``, a stalled stage a ``TimeoutError``, a dead worker a ``RuntimeError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class LoaderFactoryError(Exception):
    """Base class of every error loaderfactory raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config: where it is, what was given and what is allowed."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(LoaderFactoryError, ValueError):
    """A config that cannot build a loader; lists every problem found, one per line."""

    def __init__(self, problems: str | ConfigProblem | Sequence[ConfigProblem]) -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem("", problems)]
        elif isinstance(problems, ConfigProblem):
            problems = [problems]
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__(self._render(self.problems))

    @staticmethod
    def _render(problems: Iterable[ConfigProblem]) -> str:
        lines = [str(p) for p in problems]
        if len(lines) == 1:
            return lines[0]
        return f"{len(lines)} problems in the config:\n" + "\n".join(f"  - {line}" for line in lines)

    def __repr__(self) -> str:
        """The problems one per line, as printed: Hydra's ``instantiate`` shows errors by ``repr``."""
        return f"{type(self).__name__}: {self}"

    @property
    def paths(self) -> list[str]:
        """The dotted config paths of the problems, in report order."""
        return [p.path for p in self.problems]


class StallError(LoaderFactoryError, TimeoutError):
    """A stage waited longer than its ``timeout`` for the stage before it."""


class WorkerError(LoaderFactoryError, RuntimeError):
    """A background worker died without reporting an exception (killed by a signal, say)."""


class ResumeError(LoaderFactoryError, ValueError):
    """A saved state does not fit the loader it is loaded into (other config, worker count, world size)."""


class ArgumentError(LoaderFactoryError, ValueError):
    """A runtime constructor's argument that breaks one of its cheap invariants.

    Configs meet the same rules earlier, in the specs; a builder reports this error at the config
    field of :attr:`argument` (the constructor argument, named as the spec field it comes from).
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


class LimitError(LoaderFactoryError, ValueError):
    """A component's limit that only the data can break (an item larger than the whole RAM budget).

    Runtime components raise it naming their own argument; a ``Loader`` reports it as a
    :class:`ConfigError` at that argument's config path (``queue.ram_budget``).

    Attributes:
        argument: the constructor argument (and spec field) to change.
        message: what went wrong and what to do.
        component: the component that raised it, so a ``Loader`` can tell which slot it is.
    """

    def __init__(self, argument: str, message: str, component: object = None) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message
        self.component = component


class BuildInterrupted(KeyboardInterrupt):
    """Ctrl-C while a loader was being built; what was built so far is already closed.

    A ``KeyboardInterrupt``, so that every ``except KeyboardInterrupt`` still catches it.

    Attributes:
        built: the slots built before it, in pipeline order.
        building: the slot it stopped in, or ``None`` once every slot was built.
    """

    def __init__(self, built: list[str], building: str | None) -> None:
        super().__init__(f"interrupted while building {building or 'the loader'}")
        self.built, self.building = built, building


class ResumeWarning(UserWarning):
    """A state was loaded although its config differs where that cannot change the batches: the data
    was read from another place (``dataset.root``), the same kind and length."""
