"""After a resume, the trainer reads the train loader's ``len()`` again at the next epoch."""

from __future__ import annotations

from typing import Any


class LengthReread:
    """Makes Lightning read the train loader's length once more, at the epoch after a resumed one.

    Lightning reads ``len()`` when a fit starts and keeps it for every epoch (its progress bar, its
    epoch end, ``val_check_interval``). A resumed fit starts in the resumed epoch, whose length is
    the batches taken before the checkpoint plus the rest, counted at the world size of now: at
    another world size that is not a whole epoch (22 of 32 batches from 2 ranks to 1; 21 of 16 from
    1 rank to 2), so every later epoch would be cut short, or show a wrong total. Lightning reads the
    length again at each epoch its ``reload_dataloaders_every_n_epochs`` asks for: this sets that to
    1 from the resume until the next epoch has read the length, then gives the user's value back.
    """

    def __init__(self) -> None:
        self._trainer: Any = None
        self._users = 0
        self._read_in: int | None = None  # the epoch whose start read the resumed epoch's length

    def request(self, trainer: Any) -> None:
        """Call when a train state is loaded: the trainer will read the length at the next epoch."""
        if trainer is None or not hasattr(trainer, "reload_dataloaders_every_n_epochs"):
            return  # no trainer (the module used by itself): nothing caches the length
        if self._trainer is None:
            self._trainer, self._users = trainer, trainer.reload_dataloaders_every_n_epochs
        trainer.reload_dataloaders_every_n_epochs = 1
        self._read_in = None

    def on_read(self) -> None:
        """Call when the trainer asks for the train loader (it reads its length next)."""
        trainer = self._trainer
        if trainer is None:
            return
        if self._read_in is None:
            self._read_in = trainer.current_epoch  # the resumed epoch
        elif trainer.current_epoch > self._read_in:  # the next one: its length is a whole epoch's
            self.end()

    def end(self) -> None:
        """Give the trainer its own setting back (also when the fit ends within the resumed epoch)."""
        if self._trainer is not None:
            self._trainer.reload_dataloaders_every_n_epochs = self._users
            self._trainer = None
