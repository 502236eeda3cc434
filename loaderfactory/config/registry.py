"""One table per slot, plus datasets' helpers: transforms and collate functions.

Each entry pairs a spec class (what YAML may say) with a builder (how to make the component).
Built-ins are registered in :mod:`loaderfactory.config.builtins`; users call :func:`register`, and installed
packages expose a callable under the entry-point group ``loaderfactory.plugins``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from loaderfactory.config.specs.base import Spec
from loaderfactory.errors import ConfigError, ConfigProblem

Table = Literal["dataset", "queue", "loader", "stream", "prefetch", "transform", "collate"]
TABLES: tuple[Table, ...] = get_args(Table)
SLOTS: tuple[Table, ...] = ("dataset", "queue", "loader", "stream", "prefetch")
"""The pipeline's slots, in the order batches flow through them."""

PLUGIN_GROUP = "loaderfactory.plugins"
Builder = Callable[..., Any]
B = TypeVar("B", bound=Builder)


Setup = Sequence[str] | Callable[[Path], Sequence[str]]
"""Overrides, or a function that prepares a temporary folder (files to read) and returns them."""


@dataclass(frozen=True)
class Contract:
    """How the contract tests put a kind into a small pipeline, and what they may expect of it.

    A slot kind's ``setup`` is the overrides that select it, in batches of 4, over the tests' small
    synthetic dataset (42 items): ``["loader=my_kind", "loader.batch_size=4"]``. A dataset
    kind's ``setup`` gives :data:`CONTRACT_LENGTH` items; when it needs files it is a function that
    writes them into the folder it is given and returns the overrides.

    Args:
        setup: the overrides, or a function of a temporary folder returning them.
        name: tells apart several contracts of one kind (a dataset kind reading several formats).
        exact_resume: restored mid-epoch, it yields exactly the batches an unbroken run would;
            ``False`` for a kind that restores its statistics but redraws (a queue).
        break_finishes_epoch: after a ``break``, the next ``iter()`` yields the rest of the broken
            epoch rather than a new one (a stream of fixed-size epochs).
        with_workers: overrides that make it load in worker processes; the resume contract runs
            again with them.
    """

    setup: Setup
    name: str = ""
    exact_resume: bool = True
    break_finishes_epoch: bool = False
    with_workers: Sequence[str] = ()

    def overrides(self, folder: Path) -> list[str]:
        """The overrides that select the kind; ``folder`` receives any files it reads."""
        return list(self.setup(folder) if callable(self.setup) else self.setup)


CONTRACT_LENGTH = 10
"""Items of a dataset kind's contract setup."""


@dataclass(frozen=True)
class Entry:
    """A registered kind: its spec class, the callable that builds it from a spec, its contracts."""

    table: Table
    kind: str
    spec: type[Spec]
    builder: Builder
    contracts: tuple[Contract, ...] = ()


_tables: dict[Table, dict[str, Entry]] = {table: {} for table in TABLES}
_plugins_loaded = False
_builtins_loaded = False


class lazy:  # reads as a function at the registration site
    """A function imported on its first call: a builder, ``lazy("my_package.builders", "build_thing")``,
    or a contract's setup; registering a kind this way imports none of its runtime (torch)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name
        self._builder: Builder | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._builder is None:
            self._builder = getattr(importlib.import_module(self.module), self.name)
        return self._builder(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.module}.{self.name})"


def _load_builtins() -> None:
    """Register the built-in kinds, once, before the first use of any table."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        importlib.import_module("loaderfactory.config.builtins")


def register(
    table: Table,
    kind: str,
    spec: type[Spec],
    builder: Builder | None = None,
    *,
    contract: Contract | Sequence[str] | Sequence[Contract] | None = None,
    replace: bool = False,
) -> Any:
    """Register ``kind`` in ``table``; with no ``builder``, return a decorator that takes one.

    Args:
        table: one of :data:`TABLES` (``"prefetch"``, ``"dataset"``, ``"transform"``, ...).
        kind: the name YAML selects it by (``kind: my_thing``); stable ``snake_case``.
        spec: the :class:`~loaderfactory.config.specs.base.Spec` subclass validating its config.
        builder: called as ``builder(spec, upstream, context)`` for slots and
            ``builder(spec)`` for datasets' helpers (see docs/guides/registering.md).
        contract: how the contract tests build a small pipeline with it (see :class:`Contract`);
            a list of overrides is ``Contract(overrides)``. Every slot kind needs one.
        replace: allow replacing an existing kind; otherwise re-registering raises.
    """
    _load_builtins()
    if table not in _tables:
        raise ValueError(f"unknown registry table {table!r}; known: {', '.join(TABLES)}")
    if not (isinstance(spec, type) and issubclass(spec, Spec)):
        raise TypeError(f"spec for {table} {kind!r} must subclass loaderfactory.Spec, got {spec!r}")
    contracts = _contracts(contract)

    def _add(fn: B) -> B:
        if kind in _tables[table] and not replace:
            raise ValueError(f"{table} kind {kind!r} is already registered; pass replace=True to override it")
        _tables[table][kind] = Entry(table, kind, spec, fn, contracts)
        return fn

    if builder is None:
        return _add
    _add(builder)
    return builder


def _contracts(contract: Contract | Sequence[str] | Sequence[Contract] | None) -> tuple[Contract, ...]:
    if contract is None:
        return ()
    if isinstance(contract, Contract):
        return (contract,)
    if isinstance(contract, str):
        raise TypeError(f"contract must be a list of overrides, got the string {contract!r}")
    items = list(contract)
    contracts = [item for item in items if isinstance(item, Contract)]
    overrides = [item for item in items if isinstance(item, str)]
    if len(contracts) == len(items):
        return tuple(contracts)
    if len(overrides) == len(items):
        return (Contract(tuple(overrides)),)
    raise TypeError(f"contract must be a Contract, a list of them or a list of overrides, got {contract!r}")


def unregister(table: Table, kind: str) -> None:
    """Remove a kind (tests and plugins that clean up after themselves)."""
    _load_builtins()
    _tables[table].pop(kind, None)


def available(table: Table) -> list[str]:
    """The registered kinds of ``table``, sorted."""
    load_plugins()
    if table not in _tables:
        raise ValueError(f"unknown registry table {table!r}; known: {', '.join(TABLES)}")
    return sorted(_tables[table])


def lookup(table: Table, kind: str, path: str = "") -> Entry:
    """The entry for ``kind``; an unknown kind is a :class:`ConfigError` naming the closest match."""
    load_plugins()
    entries = _tables[table]
    if kind in entries:
        return entries[kind]
    raise ConfigError(ConfigProblem(path or f"{table}.kind", unknown_kind_message(table, kind)))


def unknown_kind_message(table: Table, kind: object) -> str:
    """``unknown kind 'thred'. Did you mean 'thread'? Known: thread``."""
    known = sorted(k for k in _tables[table] if not k.startswith("_"))  # `_target_` is not a kind
    guess = difflib.get_close_matches(str(kind), known, n=1)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    extra = " (or give a _target_ instead of a kind)" if "_target_" in _tables[table] else ""
    return f"unknown {table} kind {kind!r}.{hint} Known: {', '.join(known) or '(none)'}{extra}"


def load_plugins() -> None:
    """Call every ``loaderfactory.plugins`` entry point once; each registers its kinds."""
    global _plugins_loaded
    _load_builtins()
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        try:
            hook = point.load()
            if callable(hook):
                hook()
        except Exception as err:
            raise ImportError(
                f"loaderfactory plugin {point.name!r} ({point.value}) failed to load: {err}"
            ) from err
