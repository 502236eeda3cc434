"""A mixture's per-source shares, logged through Lightning while a fit trains (``log_shares=True``).

A data module has no ``self.log``; a callback does, through the ``LightningModule`` its hooks get, and
Lightning logs from ``on_train_batch_end`` on every step. So the data module adds a callback of this
body (one class per Lightning package, as for the data module) to the trainer for the fit.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from loaderfactory.errors import ResumeError
from loaderfactory.loader import Loader


class ShareLogging:
    """After each training batch, each source's share of what the epoch drew so far and its target.

    Logged through the ``LightningModule`` (``on_step`` only, the same value on every rank) as
    ``mixture/<name>/share`` (samples drawn from the source / samples drawn) and
    ``mixture/<name>/target`` (what the weights ask of those samples / samples drawn). The position
    is the train loader's, counted by all ranks, so it is exact after a resume at another world size
    too. Costs a ``Loader.state_dict()`` and a ``shares()`` per step, well under a millisecond.
    """

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loader = trainer.datamodule.loaders.get("train")
        if loader is None:
            return
        for key, value in share_metrics(loader).items():
            pl_module.log(key, value, on_step=True, on_epoch=False)


def share_metrics(loader: Loader) -> dict[str, float]:
    """``mixture/<name>/share`` and ``mixture/<name>/target`` of each source at the loader's position;
    empty when its dataset is no mixture, or nothing of the epoch was read, or it has no position."""
    shares = getattr(loader.dataset, "shares", None)
    where = epoch_position(loader)
    if not callable(shares) or where is None or where[1] == 0:
        return {}
    epoch, position = where
    metrics: dict[str, float] = {}
    for name, counts in shares(epoch, position).items():
        metrics[f"mixture/{name}/share"] = counts["drawn"] / position
        metrics[f"mixture/{name}/target"] = counts["target"] / position
    return metrics


def epoch_position(loader: Loader) -> tuple[int, int] | None:
    """``(epoch, position)`` of the loader slot: the epoch, and the items of its order all ranks took.

    Both loader kinds (``torch``, ``sharded``) record them, counted in the epoch's global order, which
    a mixture keeps in position order; ``None`` for a loader whose state cannot be saved.
    """
    try:
        state = loader.state_dict()
    except ResumeError:
        return None
    own = state["slots"].get("loader", {}).get("state", {})
    epoch, position = own.get("epoch"), own.get("position")
    if not isinstance(epoch, int) or not isinstance(position, int):
        return None
    return epoch, position


def share_logger_for(data_module: type) -> ShareLogging:
    """A :class:`ShareLogging` callback of the Lightning package ``data_module`` is built on
    (``lightning.pytorch`` or ``pytorch_lightning``: its ``LightningDataModule``'s package)."""
    package = next(
        base.__module__.split(".core.", 1)[0]
        for base in data_module.__mro__
        if base.__name__ == "LightningDataModule"
    )
    return _logger_class(importlib.import_module(package).Callback)()


@functools.cache
def _logger_class(callback: type) -> type[ShareLogging]:
    return type("ShareLogger", (ShareLogging, callback), {"__doc__": ShareLogging.__doc__})
