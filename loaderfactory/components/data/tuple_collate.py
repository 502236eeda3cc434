"""``TupleCollate``: dict items → a tuple batch in key order, for models that unpack ``x, y = batch``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loaderfactory.components.data.collate import EVERY_SAMPLE, MissingFieldError, item_name
from loaderfactory.components.data.stacked import collate_field


class TupleCollate:
    """Collate dict items into ``(batch[keys[0]], batch[keys[1]], ...)`` as torch's ``default_collate`` would.

    ``[{"image": x0, "label": 3}, {"image": x1, "label": 5}]`` with ``keys=["image", "label"]``
    becomes ``(stack([x0, x1]), tensor([3, 5]))``, so a training step written for torchvision-style
    ``(input, target)`` batches takes them unchanged. Other keys are left out.

    Args:
        keys: the item keys, in the order of the tuple; at least one, no repeats.
    """

    def __init__(self, keys: Sequence[str]) -> None:
        if isinstance(keys, str) or not keys:
            raise ValueError(f"keys must be a non-empty list of item keys, got {keys!r}")
        if len(set(keys)) != len(keys):
            raise ValueError(f"keys must not repeat, got {list(keys)}")
        self.keys = tuple(keys)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
        if not items:
            raise ValueError("cannot collate an empty list of items")
        for position, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise TypeError(f"TupleCollate needs dict items, got {type(item).__name__} (item {position})")
            missing = [key for key in self.keys if key not in item]
            if missing:
                raise MissingFieldError(
                    f"tuple collate keys {missing} are not in the item; it has {sorted(item, key=str)} "
                    f"({item_name(item, position, len(items))}); choose keys among them, or {EVERY_SAMPLE}"
                )
        return tuple(collate_field(items, key) for key in self.keys)

    def __repr__(self) -> str:
        return f"TupleCollate(keys={list(self.keys)!r})"
