"""Which shuffled order a dataset offers: its own ``epoch_order``, or the one of the dataset it wraps.

A dataset wrapped for augmentation (``self.dataset = shards``) hides the wrapped dataset's
``epoch_order``, and a shuffle then reads in uniform random order: for a ``ShardsDataset``, a shard
opened for nearly every sample. The order is forwarded where forwarding is sound:

* torch's :class:`~torch.utils.data.Subset` (its own ``__getitem__``): item ``i`` is
  ``dataset[indices[i]]``, so its order is its positions sorted by where their index comes in the
  wrapped dataset's order (windows of shards stay together);
* a wrapper that declares item ``i`` is its ``dataset[i]`` by subclassing
  :class:`ForwardEpochOrder` (or by defining ``epoch_order`` itself).

Any other wrapper of the same length around a dataset with an order that matters is warned about
once, naming the fix; a wrapper of another length maps indices in its own way, and is left alone.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from loaderfactory.components.order_permutation import permutation

Order = Callable[[int, int], Sequence[int]]
"""``(seed, epoch)`` → a permutation of the dataset's indices."""

_DEPTH = 8  # wrappers looked through at most: a cycle of ``.dataset`` attributes ends here
_warned: weakref.WeakSet[Any] = weakref.WeakSet()


class ForwardEpochOrder:
    """Mixin for a dataset whose item ``i`` is ``self.dataset[i]`` (transformed): a shuffle follows
    the wrapped dataset's own order (a ``ShardsDataset``'s windows of shards) instead of a uniform
    one. ``class Augmented(ForwardEpochOrder, Dataset): ...`` with ``self.dataset`` set."""

    dataset: Any

    def epoch_order(self, seed: int, epoch: int) -> Sequence[int]:
        """The wrapped dataset's order for ``(seed, epoch)``; a uniform permutation when it has none."""
        inner = order_of(self.dataset)
        if inner is not None:
            return inner(seed, epoch)
        return permutation(len(self.dataset), seed, epoch)


def order_of(dataset: Any) -> Order | None:
    """The shuffled order ``dataset`` offers, itself or through what it wraps; None: none (a uniform
    permutation then). Warns once per wrapper that hides an order it should forward."""
    order, hidden = _resolve(dataset, _DEPTH)
    if order is None and hidden is not None:
        _warn(*hidden)
    return order


def order_source(dataset: Any) -> str:
    """Where ``dataset``'s shuffled order comes from: ``"dataset"`` (its own ``epoch_order``,
    :class:`ForwardEpochOrder`'s included), ``"forwarded"`` (a ``Subset`` following the order of
    what it wraps) or ``"uniform"`` (a seeded permutation). Warns of nothing."""
    if callable(getattr(dataset, "epoch_order", None)):
        return "dataset"
    order, _ = _resolve(dataset, _DEPTH)
    return "uniform" if order is None else "forwarded"


def _resolve(dataset: Any, depth: int) -> tuple[Order | None, tuple[Any, Any, str] | None]:
    """``(order, hidden)``: ``dataset``'s order, else the wrapper that hides one, what it wraps and
    what a uniform order costs there."""
    own = getattr(dataset, "epoch_order", None)
    if callable(own):
        return own, None
    inner = getattr(dataset, "dataset", None)
    if inner is None or depth == 0:
        return None, None
    order, hidden = _resolve(inner, depth - 1)
    if order is None:
        return None, hidden
    if _plain_subset(dataset):
        return _subset_order(order, dataset.indices, len(inner)), None
    cost = _uniform_cost(inner)
    if cost is None or not _same_length(dataset, inner):
        return None, None
    return None, (dataset, inner, cost)


def _plain_subset(dataset: Any) -> bool:
    """A torch ``Subset`` whose item ``i`` is ``dataset[indices[i]]`` (``__getitem__`` not overridden)."""
    from torch.utils.data import Subset  # here: the order engine itself needs no torch

    return isinstance(dataset, Subset) and type(dataset).__getitem__ is Subset.__getitem__


def _subset_order(inner: Order, indices: Sequence[int], inner_length: int) -> Order:
    """A subset's order: its positions in the order their indices take in ``inner``'s order."""

    def order(seed: int, epoch: int) -> list[int]:
        rank = np.empty(inner_length, dtype=np.int64)
        rank[np.asarray(inner(seed, epoch), dtype=np.int64)] = np.arange(inner_length)
        places = rank[np.asarray(indices, dtype=np.int64) % max(1, inner_length)]
        return np.argsort(places, kind="stable").tolist()  # type: ignore[no-any-return]  # ints

    return order


def _uniform_cost(dataset: Any) -> str | None:
    """What reading ``dataset`` in uniform order costs (its ``uniform_order_cost()``); None: nothing.
    A dataset with an order and no such method is taken to need its order."""
    cost = getattr(dataset, "uniform_order_cost", None)
    if not callable(cost):
        return f"{type(dataset).__name__}'s own shuffled order is lost"
    said = cost()
    return None if said is None else str(said)


def _same_length(wrapper: Any, inner: Any) -> bool:
    try:
        return len(wrapper) == len(inner)
    except TypeError:  # no len(): not a map-style wrapper of the same items
        return False


def _warn(wrapper: Any, inner: Any, cost: str) -> None:
    """Warn once per wrapper object that ``shuffle`` does not follow the order it hides."""
    try:
        if wrapper in _warned:
            return
        _warned.add(wrapper)
    except TypeError:  # not weakly referable: warn every epoch rather than never
        pass
    name, inner_name = type(wrapper).__name__, type(inner).__name__
    direct = (
        ", or define `def epoch_order(self, seed, epoch): return self.dataset.epoch_order(seed, epoch)`"
        if callable(getattr(inner, "epoch_order", None))
        else ""
    )
    warnings.warn(
        f"shuffle: {name} wraps a {inner_name} (its .dataset) but has no epoch_order, so samples are "
        f"read in uniform random order: {cost}. If {name}[i] is its dataset[i] (augmented, say), "
        f"forward the order: subclass loaderfactory.ForwardEpochOrder ({name}(ForwardEpochOrder, ...))"
        f"{direct}",
        UserWarning,
        stacklevel=2,
    )
