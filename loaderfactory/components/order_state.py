"""The order a saved position is counted in: recorded in a loader's state, checked when it is loaded.

A position counts indices of an epoch's sequence, so it means the same only in the same order: a
state saved mid-epoch and resumed in another order would repeat some items and skip others. The
state's ``"order"`` field says which order it counted in:

* ``"sequential"``: no shuffle, ``0, 1, ..., length - 1``;
* ``"uniform"``: a permutation seeded by ``(seed, epoch)``;
* ``"dataset"``: the dataset's own ``epoch_order`` (a ``ShardsDataset``'s windows of shards);
* ``"forwarded"``: a torch ``Subset`` following the order of the dataset it wraps
  (:mod:`~loaderfactory.components.order_forwarding`);
* ``"sampler"``: a sampler or batch sampler of yours;
* ``"stream"``: an iterable dataset's own order.

A state without the field was saved before orders were forwarded: it counted in the dataset's own
order where the dataset itself has one, else in a uniform one (:func:`legacy_order`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loaderfactory.components.order_forwarding import order_source
from loaderfactory.errors import ResumeError

ORDER_FIELD = "order"

_MEANING = {
    "sequential": "dataset order (no shuffle)",
    "uniform": "a uniform permutation",
    "dataset": "the dataset's own epoch_order",
    "forwarded": "the order of the dataset a Subset wraps",
    "sampler": "a sampler of yours",
    "stream": "an iterable dataset's own order",
}


def shuffled_order(shuffle: bool, dataset: Any) -> str:
    """The order an epoch's sequence of ``dataset`` is in (see the module docstring)."""
    return order_source(dataset) if shuffle else "sequential"


def legacy_order(current: str) -> str:
    """The order a state saved without the field counted in, for a loader that reads in
    ``current`` now: the same, but uniform where an order is forwarded now."""
    return "uniform" if current == "forwarded" else current


def check_order(owner: str, state: Mapping[str, Any], current: str, position: int) -> None:
    """Raise :class:`ResumeError` when ``state`` counted ``position`` (> 0) in another order than
    ``current``. At an epoch's start (position 0) nothing of the epoch was consumed, and any order
    goes on exactly."""
    saved = state.get(ORDER_FIELD)
    if saved is None:
        saved, how = legacy_order(current), " (a state without 'order' counted in it)"
    else:
        how = ""
    if saved == current or position == 0:
        return
    raise ResumeError(
        f"{owner}: the state counted its position {position} in {_name(saved)}{how}, but this loader "
        f"reads in {_name(current)}; resuming mid-epoch in another order would repeat some items and "
        "skip others. Resume with the dataset (and its wrappers) that saved the state, or from a "
        "state saved at the end of an epoch (position 0)"
    )


def _name(order: object) -> str:
    meaning = _MEANING.get(order) if isinstance(order, str) else None
    return f"order {order!r}" + (f" ({meaning})" if meaning else "")
