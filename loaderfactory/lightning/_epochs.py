"""What Lightning iterates for one stage: the loader's passes, one after another, or one pass replayed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from loaderfactory.loader import Loader


class Epochs:
    """The loader's passes, each one ended before the next begins.

    It is stateful like the ``Loader``, so Lightning saves its position with the fit loop and
    restores it on a mid-epoch restart; the data module saves the same state itself because
    Lightning restores a loader only mid-epoch, not from a checkpoint at an epoch's end. Loading the
    same state twice is harmless: it takes effect at the next pass.

    Lightning takes exactly ``len()`` batches of an epoch and never asks for the end of the pass,
    while a ``Loader`` closes an epoch at the end of its pass (the ``sharded`` kind carries its
    rollover then; the ``stream`` kind would finish the open epoch next). So a pass left at its
    last batch is ended when the next one starts, or when ``len()`` is asked first (as the trainer
    does before each epoch): the length is then the next epoch's, which differs from a resumed
    epoch's after a resume at another world size. A state saved at an epoch's end, whose restored
    pass has nothing left, has that pass run first.

    With :meth:`replay` every pass starts again where the loader stood when it was called, so
    Lightning's ``overfit_batches`` takes the same batches every epoch.
    """

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self._open: Iterator[Any] | None = None
        self._left: Iterator[Any] | None = None  # batches past len() of an ended epoch: the next pass's
        self._start: Mapping[str, Any] | None = None

    def __len__(self) -> int:
        self._end_delivered_pass()
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self._start is not None:
            self.loader.load_state_dict(self._start)
        else:
            self._end_delivered_pass()
            if self._left is not None:
                self._open, self._left = self._left, None
                return self._open
        self._open = iter(self.loader)
        return self._open

    def replay(self) -> None:
        """Start every pass from the loader's current position (its first batch, when not used yet)."""
        self._start = self.loader.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._open = self._left = None

    def _end_delivered_pass(self) -> None:
        """Run the open pass to its end once every batch of its epoch went out (without replay)."""
        if self._start is not None or self._left is not None or not self._epoch_delivered():
            return
        ending = self._open if self._open is not None else iter(self.loader)
        self._open = None
        for batch in ending:  # normally nothing is left; if len() counted short, go on, drop nothing
            self._left = itertools.chain([batch], ending)
            return

    def _epoch_delivered(self) -> bool:
        """Whether every batch of the current epoch went out but its pass has not ended."""
        try:
            length = len(self.loader)
        except TypeError:  # unsized: Lightning reads each pass to its end itself
            return False
        return 0 < length <= self.loader.batches_in_epoch
