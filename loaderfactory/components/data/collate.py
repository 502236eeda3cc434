"""``DictCollate``: merge dict items into one dict batch, stacking what can be stacked."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from loaderfactory.errors import LoaderFactoryError

KeyFilter = Sequence[str] | Callable[[str], bool] | None
OnUnstackable = Literal["warn", "error", "list"]


class MissingFieldError(LoaderFactoryError, KeyError):
    """A batch item without a field the collate needs (one the other items have, or one asked
    for); the message names the item (its ``__key__`` and ``__url__`` when it has them) and the
    field. A ``KeyError``, as torch's collate raises, shown without ``KeyError``'s quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


EVERY_SAMPLE = (
    "set dataset.keys to the fields every sample must have (a sample without one is then refused "
    "when read, naming it), or write the sample again"
)
"""What to do about a sample lacking a field: the advice of :class:`MissingFieldError`."""


def item_name(item: Mapping[str, Any], position: int, count: int) -> str:
    """``item 3 of the 8 collated``, with ``sample 'k' of <url>`` for a shards sample."""
    where = f"item {position} of the {count} collated"
    if "__key__" in item:
        where = (
            f"sample {item['__key__']!r}"
            + (f" of {item['__url__']}" if "__url__" in item else "")
            + f" ({where})"
        )
    return where


def collate_same_fields(collate: Callable[[Any], Any], items: Any) -> Any:
    """``collate(items)``, refusing dict items that do not all have the same fields with a
    MissingFieldError naming the item lacking one. torch's ``default_collate`` takes the first
    item's fields: one that item lacks would leave the batch silently, one a later item lacks is a
    bare ``KeyError``. Items of equal lengths cost no more than that comparison: among them, only
    a later item lacking a field differs, and torch's ``KeyError`` then is named here."""
    first = items[0] if isinstance(items, Sequence) and items else None
    if type(first) is dict and not _equal_lengths(items):
        named = missing_field(items)
        if named is not None:
            raise named
    try:
        return collate(items)
    except KeyError as err:
        named = None if type(first) is not dict else missing_field(items)
        if named is None:
            raise
        raise named from err


def _equal_lengths(items: Sequence[Any]) -> bool:
    """Whether the items all have one length (about 70 ns an item); False when one has none."""
    try:
        return len(set(map(len, items))) == 1
    except TypeError:
        return False


def missing_field(items: Sequence[Any]) -> MissingFieldError | None:
    """The error naming the first of dict ``items`` that lacks a field another one has; None when
    they all have the same fields (or one is no mapping: torch's collate names that)."""
    first = items[0]
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            return None
        absent = [key for key in first if key not in item]
        other = 0
        if not absent:  # the first item lacks what this one has
            absent, other, item, position = [key for key in item if key not in first], position, first, 0
        if absent:
            return MissingFieldError(
                f"collate: {item_name(item, position, len(items))} has no {', '.join(map(repr, absent))}, "
                f"which item {other} has; {EVERY_SAMPLE}"
            )
    return None


@dataclass(eq=False, repr=False)  # compared by identity, as a function is; __repr__ below
class DictCollate:
    """Collate a list of dict items into one dict: ``[{"vol": t1}, {"vol": t2}]`` → ``{"vol": stack}``.

    Tensors of equal shape are stacked; numpy arrays and Python numbers are converted to tensors
    first (when asked); everything else, and tensors whose shapes differ, becomes a list. Use it
    for items whose tensors may not all stack (volumes of different sizes next to a fixed-size
    label), where ``default_collate`` would raise.

    Args:
        keys: keep only these keys (a list, or a predicate called with each key); ``None`` keeps all.
            A selected key missing from any item is a ``KeyError`` naming the item's index and keys.
        stack_tensors: stack tensors of equal shape; ``False`` gives lists of tensors.
        convert_numpy: turn numpy arrays into tensors (then stacked like tensors).
        convert_numbers: turn Python numbers (not bools' strings) into tensors.
        on_unstackable: what to do with a key whose tensors differ in shape: ``"warn"`` (list plus
            a warning naming key and shapes), ``"error"`` (``ValueError`` naming them), ``"list"``
            (list, silently).
    """

    keys: KeyFilter = None
    stack_tensors: bool = True
    convert_numpy: bool = True
    convert_numbers: bool = True
    on_unstackable: OnUnstackable = "warn"

    def __post_init__(self) -> None:
        if self.on_unstackable not in ("warn", "error", "list"):
            raise ValueError(f"on_unstackable must be 'warn', 'error' or 'list', got {self.on_unstackable!r}")
        if isinstance(self.keys, str):
            raise TypeError(f"keys must be a list of keys or a predicate, got the string {self.keys!r}")

    def _selected(self, item: Mapping[str, Any]) -> list[str]:
        if self.keys is None:
            return list(item)
        if callable(self.keys):
            return [key for key in item if self.keys(key)]
        return list(self.keys)

    def _convert(self, value: Any) -> Any:
        if self.convert_numpy and isinstance(value, np.ndarray):
            return torch.from_numpy(value)
        if (
            self.convert_numpy
            and isinstance(value, np.generic)
            and not isinstance(value, np.str_ | np.bytes_)
        ):
            return torch.as_tensor(value.item())
        if self.convert_numbers and isinstance(value, numbers.Number) and not isinstance(value, bool):
            return torch.as_tensor(value)
        return value

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not items:
            raise ValueError("cannot collate an empty list of items")
        for item in items:
            if not isinstance(item, Mapping):
                raise TypeError(f"DictCollate needs dict items, got {type(item).__name__}")
        selected = self._present(items)
        return {key: self._merge(key, [self._convert(item[key]) for item in items]) for key in selected}

    def _present(self, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """The keys to collate; MissingFieldError naming the first item that lacks one."""
        selected = self._selected(items[0])
        for index, item in enumerate(items):
            missing = [key for key in selected if key not in item]
            if missing:
                # Without the list filter the keys come from item 0: say so, it is why they are wanted.
                source = "" if isinstance(self.keys, Sequence) else ", taken from item 0,"
                raise MissingFieldError(
                    f"collate keys {missing}{source} are not in the item; it has {sorted(item, key=str)} "
                    f"({item_name(item, index, len(items))}); choose keys among them, or {EVERY_SAMPLE}"
                )
        return selected

    def _merge(self, key: str, values: list[Any]) -> Any:
        if not (self.stack_tensors and all(isinstance(v, torch.Tensor) for v in values)):
            return values
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) == 1:
            return torch.stack(values)
        message = f"collate: cannot stack key {key!r}: its tensors have shapes {sorted(shapes)}"
        if self.on_unstackable == "error":
            raise ValueError(f"{message}; crop or pad them, or set on_unstackable to 'warn' or 'list'")
        if self.on_unstackable == "warn":
            warnings.warn(f"{message}; kept as a list", RuntimeWarning, stacklevel=3)
        return values

    def __repr__(self) -> str:
        return f"DictCollate(keys={self.keys!r}, on_unstackable={self.on_unstackable!r})"
