"""How ``pack`` laid an item out as fields, and how the reader gives the item back.

``pack`` stores a dict item's values under ``<key>.<extension>`` (``image.npy``, ``label.cls``), a
tuple's or list's under ``0.<ext>``, ``1.<ext>``, ..., any other item under ``item.<ext>``
(:func:`~loaderfactory.shards.write.encode.item_fields`). :class:`ItemLayout` records that, once for
the shard set, in the index (``"items"``, see :mod:`loaderfactory.shards.index.shard_index`)::

    {"type": "dict", "fields": {"image": "image.npy", "label": "label.cls"}}
    {"type": "tuple", "fields": ["0.npy", "1.cls"]}      (a list item: "type": "list")
    {"type": "value", "fields": ["item.npy"]}

A key stored under several names across items (an int in one, a float in another: ``label.cls``
and ``label.json``) lists them all: ``"label": ["label.cls", "label.json"]``. A dict key that only
some items have (tar shards allow it) is listed too.

:class:`SampleShape` turns a decoded sample back into the item (a rename of its fields, no copy of
a value); without a layout (shards written elsewhere) or with ``fields="raw"``, it gives the
webdataset sample: the stored names plus ``__key__`` and ``__url__``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loaderfactory.errors import ArgumentError

ITEM_TYPES = ("dict", "tuple", "list", "value")
READINGS = ("item", "raw")
"""``fields``: ``item`` gives packed shards back as the items packed; ``raw`` gives stored fields."""
METADATA = ("__key__", "__url__")


def item_type(item: Any) -> str:
    """``dict``, ``tuple``, ``list`` or ``value``: which of pack's layouts ``item`` takes (the order
    of :func:`~loaderfactory.shards.write.encode.item_fields`' checks: any mapping is a dict)."""
    if isinstance(item, Mapping):
        return "dict"
    if isinstance(item, tuple):
        return "tuple"
    if isinstance(item, list):
        return "list"
    return "value"


def key_of(name: str) -> str:
    """The item key a stored field name stands for: the name without its extension
    (``label.cls`` → ``label``, ``a.b.npy`` → ``a.b``; pack adds exactly one)."""
    return name[: name.rfind(".")]


@dataclass(frozen=True)
class ItemLayout:
    """The items' structure: their type, and each key (a dict's key; a position ``"0"`` of a tuple
    or list; ``"item"``) with the stored field names its values took, in the items' order."""

    type: str
    fields: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.fields]

    def names(self) -> dict[str, str]:
        """Stored field name → item key."""
        return {name: key for key, names in self.fields for name in names}

    def to_json(self) -> dict[str, Any]:
        """The index's ``"items"`` record (a lone name as a str, several as a list)."""
        entries = [(key, names[0] if len(names) == 1 else list(names)) for key, names in self.fields]
        if self.type == "dict":
            return {"type": self.type, "fields": dict(entries)}
        return {"type": self.type, "fields": [names for _, names in entries]}


def layout_from_json(record: Any, where: str) -> ItemLayout:
    """The layout an index's ``"items"`` record describes; ValueError naming ``where`` (the index
    and the record) when it is malformed."""
    problem = f"{where}: items = {record!r}: "
    if not isinstance(record, dict) or record.get("type") not in ITEM_TYPES:
        raise ValueError(problem + f"needs 'type' (one of {', '.join(ITEM_TYPES)}) and 'fields'")
    kind, fields = record["type"], record.get("fields")
    if kind == "dict" and isinstance(fields, dict):
        pairs = list(fields.items())
    elif kind == "value" and isinstance(fields, list) and len(fields) == 1:
        pairs = [("item", fields[0])]
    elif kind in ("tuple", "list") and isinstance(fields, list):
        pairs = [(str(position), names) for position, names in enumerate(fields)]
    else:
        shape = {"dict": "an object of key → stored name", "value": "a list of one stored name"}
        raise ValueError(problem + f"'fields' must be {shape.get(kind, 'a list of stored names')}")
    layout = []
    for key, names in pairs:
        listed = [names] if isinstance(names, str) else names
        if not isinstance(listed, list) or not listed or not all(_named(key, n) for n in listed):
            raise ValueError(problem + f"field {key!r}: stored names are '{key}.<extension>' strings")
        layout.append((key, tuple(listed)))
    return ItemLayout(kind, tuple(layout))


def _named(key: str, name: Any) -> bool:
    return isinstance(name, str) and name.startswith(f"{key}.") and key_of(name) == key


class LayoutRecorder:
    """Collects the layout of packed items, item by item; :meth:`add` refuses an item whose type
    differs from the first item's (the reader gives every item back in one structure)."""

    def __init__(self) -> None:
        self._type: str | None = None
        self._first = 0
        self._names: dict[str, list[str]] = {}

    def add(self, index: int, kind: str, names: Iterable[str]) -> None:
        """Record item ``index``, of type ``kind``, stored under ``names``; ValueError when its type
        differs from the first item's."""
        if self._type is None:
            self._type, self._first = kind, index
        elif kind != self._type:
            raise ValueError(
                f"item {index} is a {kind} item but item {self._first} is a {self._type} item; shards "
                f"give every item back in one structure: make every item a {self._type}"
            )
        for name in names:
            known = self._names.setdefault(key_of(name), [])
            if name not in known:
                known.append(name)

    def layout(self) -> ItemLayout | None:
        """The layout of the items added (positions in order); None when none was."""
        if self._type is None:
            return None
        keys = list(self._names)
        if self._type in ("tuple", "list"):
            keys.sort(key=int)
        return ItemLayout(self._type, tuple((key, tuple(self._names[key])) for key in keys))


class SampleShape:
    """What the reader gives back for a decoded sample: the item as packed, or the raw sample.

    Args:
        layout: the shard set's layout from its index; None: shards written elsewhere, read raw.
        fields: ``"item"`` (the item as packed, where there is a layout) or ``"raw"`` (stored field
            names, ``__key__`` and ``__url__``: the webdataset convention).
        metadata: add ``__key__`` and ``__url__`` to dict items (raw samples always have them);
            refused for tuple, list and value items, which have no place for them.
        keys: what every item must have: its keys (item reads of dict items) or stored field names
            (raw reads); refused for tuple, list and value items.

    Raises:
        ArgumentError: naming ``fields``, ``metadata`` or ``keys``.
    """

    def __init__(
        self,
        layout: ItemLayout | None,
        fields: str = "item",
        metadata: bool = False,
        keys: Collection[str] = (),
    ) -> None:
        if fields not in READINGS:
            raise ArgumentError("fields", f"fields must be one of {', '.join(READINGS)}, got {fields!r}")
        self.layout = layout if fields == "item" else None
        self.keys, self.metadata = tuple(keys), metadata
        self._type = "raw" if self.layout is None else self.layout.type
        self._names = {} if self.layout is None else self.layout.names()
        self._renamed: dict[tuple[str, ...], tuple[str, ...]] = {}  # renamed_keys, by stored fields
        if self.layout is not None:
            self._check(self.layout)

    def _check(self, layout: ItemLayout) -> None:
        if layout.type != "dict":
            what = f"{layout.type} items" if layout.type != "value" else "single values"
            if self.metadata:
                raise ArgumentError(
                    "metadata",
                    f"these shards hold {what}, which have no place for __key__ and __url__: set "
                    "metadata: false, or read fields: raw (stored fields with __key__ and __url__)",
                )
            if self.keys:
                raise ArgumentError(
                    "keys",
                    f"keys name the keys of dict items, but these shards hold {what}: drop keys, or "
                    "read fields: raw and name stored fields (0.npy)",
                )
            return
        unknown = [key for key in self.keys if key not in layout.keys]
        if unknown:
            stored = [key for key in unknown if key in self._names]
            hint = (
                f"; {stored[0]!r} is a stored field name: name the item's key {self._names[stored[0]]!r}, "
                "or read fields: raw"
                if stored
                else ""
            )
            raise ArgumentError(
                "keys",
                f"no packed item has {', '.join(map(repr, unknown))}; the items' keys are "
                f"{', '.join(layout.keys)}{hint}",
            )

    @property
    def single(self) -> bool:
        """Whether each item is its one value (no field to index it by)."""
        return self._type == "value"

    def field_of(self, name: str) -> str | int:
        """Where a stored field is in the item: its key (the name itself for raw reads), or its
        position in a tuple or list item."""
        if self._type == "raw":
            return name
        key = self._names.get(name) or key_of(name)
        return key if self._type == "dict" else int(key)

    def __call__(self, sample: dict[str, Any], url: str) -> Any:
        """The item of ``sample`` (decoded, with ``__key__``; taken apart), read from the shard at
        ``url``: its fields renamed, the values themselves kept."""
        kind = self._type
        if kind == "raw":
            sample["__url__"] = url
            return sample
        key = sample.pop("__key__", None)  # the readers' only name with "__": the rest are stored fields
        if kind == "dict":
            names, item = self._names, {}
            for name, value in sample.items():  # a loop: half the time of a comprehension in 3.11
                known = names.get(name)
                item[known if known is not None else key_of(name)] = value
            if self.metadata:
                item["__key__"], item["__url__"] = key, url
            return item
        if kind == "tuple":
            return tuple(sample.values())
        if kind == "list":
            return list(sample.values())
        return next(iter(sample.values()))

    def items(self, samples: list[dict[str, Any]], url: str) -> list[Any]:
        """``[self(sample, url) for sample in samples]``, one call for a run of a shard's samples
        (the common case, dict items, renamed in one loop)."""
        if self._type == "raw":
            for sample in samples:
                sample["__url__"] = url
            return samples
        if self._type != "dict" or self.metadata:
            return [self(sample, url) for sample in samples]
        names, out = self._names, []
        for sample in samples:
            del sample["__key__"]
            item = {}
            for name, value in sample.items():
                known = names.get(name)
                item[known if known is not None else key_of(name)] = value
            out.append(item)
        return out

    def renamed_keys(self, fields: Sequence[str]) -> tuple[str, ...] | None:
        """Each stored field's key in the item, where an item is a dict of its sample's fields
        renamed and nothing more (no ``__key__`` or ``__url__``); None for any other reading."""
        if self._type != "dict" or self.metadata:
            return None
        fields = tuple(fields)
        keys = self._renamed.get(fields)
        if keys is None:
            names = self._names
            keys = self._renamed[fields] = tuple(
                known if (known := names.get(name)) is not None else key_of(name) for name in fields
            )
        return keys

    def absent(self, item: Any) -> list[str]:
        """The ``keys`` that ``item`` (what :meth:`__call__` gave) lacks."""
        return [key for key in self.keys if key not in item]

    def present(self, item: Any) -> list[str]:
        """The fields ``item`` has, for an error about one it lacks (no metadata)."""
        return sorted(key for key in item if key[:2] != "__")
