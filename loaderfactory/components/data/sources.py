"""What users bring as data: lists, arrays, datasets, iterables, and how torch's loaders take them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import Dataset, IterableDataset


def is_map_style(source: Any) -> bool:
    """Indexable and sized (a list, an array, a map-style ``Dataset``) and not an ``IterableDataset``."""
    return (
        hasattr(source, "__getitem__")
        and hasattr(source, "__len__")
        and not isinstance(source, IterableDataset)
    )


def as_dataset(source: Any) -> Dataset[Any]:
    """``source`` as something ``torch.utils.data.DataLoader`` reads.

    Map-style sources and ``IterableDataset``\\ s pass through. Any other iterable whose
    ``iter()`` starts a new pass is wrapped in :class:`IterableSource`.

    Raises:
        TypeError: ``source`` is a one-shot iterator (a generator), or not iterable at all.
    """
    if is_map_style(source) or isinstance(source, IterableDataset):
        return source  # type: ignore[no-any-return]  # either is a torch dataset in all but name
    if hasattr(source, "__next__"):
        raise TypeError(
            f"a {type(source).__name__} is a one-shot iterator: it can be read once, but a loader "
            "starts a new pass every epoch; pass a list, or an object whose __iter__ starts a new pass "
            "(a class with __iter__, or an IterableDataset)"
        )
    if not hasattr(source, "__iter__"):
        hint = (
            " (it is callable: a class rather than an instance, or a _target_ node with _partial_: true?)"
            if callable(source)
            else ""
        )
        raise TypeError(
            f"a {type(source).__name__} is neither indexable (len and [i]) nor iterable; pass a list, "
            f"an array, a map-style Dataset or an IterableDataset{hint}"
        )
    return IterableSource(source)


class IterableSource(IterableDataset[Any]):
    """A re-iterable object as an ``IterableDataset``: each ``iter()`` is a new pass of it.

    ``len()``, ``state_dict()`` and ``load_state_dict()`` are the wrapped object's, where it has
    them. With worker processes every worker would read the whole object: split it in ``__iter__``
    with ``torch.utils.data.get_worker_info()``, as for any ``IterableDataset``.
    """

    def __init__(self, source: Any) -> None:
        self.source = source

    def __iter__(self) -> Iterator[Any]:
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)

    def state_dict(self) -> dict[str, Any]:
        return self.source.state_dict()  # type: ignore[no-any-return]  # the source's own state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.source.load_state_dict(state)

    def __repr__(self) -> str:
        return f"IterableSource({self.source!r})"
