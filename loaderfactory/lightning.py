"""PyTorch Lightning: a ``LightningDataModule`` whose loaders come from loaderfactory configs.

Import it by name, ``from loaderfactory.lightning import LoaderDataModule``; it needs the ``lightning``
extra (``pip install "loaderfactory[lightning]"``), and ``import loaderfactory`` never loads Lightning.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, Literal

try:
    import pytorch_lightning as pl
except ImportError as err:  # the extra is optional; say how to get it
    raise ImportError(
        f"loaderfactory.lightning needs PyTorch Lightning ({err}); "
        'install it with pip install "loaderfactory[lightning]"'
    ) from err

from loaderfactory.errors import ResumeError
from loaderfactory.factory import build_loader
from loaderfactory.loader import Loader

Stage = Literal["train", "val", "test", "predict"]

STAGES: tuple[Stage, ...] = ("train", "val", "test", "predict")

_STAGES_OF: dict[str, tuple[Stage, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("predict",),
}
"""Lightning's ``stage`` argument of ``setup``/``teardown`` → the loaders it uses."""


class LoaderDataModule(pl.LightningDataModule):
    """One ``Loader`` per stage, built from a config; a resumed fit continues the data exactly.

    Pass it to ``Trainer.fit(model, datamodule=...)`` (or ``validate``/``test``/``predict``). Each
    stage's loader is built on first use (``setup`` or its ``*_dataloader`` hook) and closed by
    ``teardown``. Lightning takes ``len()`` batches per epoch; the loader's epochs follow one another
    as in ``for epoch ...: for batch in loader``. The train loader's position goes into every
    checkpoint (:meth:`state_dict`), so a fit resumed with ``ckpt_path=`` sees exactly the batches
    an uninterrupted fit would, mid-epoch or at an epoch's end. A stage without a config has no
    loader, as if its hook were not defined.

    Args:
        train: config of the training loader: whatever ``build_loader`` takes (a dict, a YAML path,
            an OmegaConf node such as ``cfg.data.train``, a ``LoaderSpec``); ``None``: no such stage.
        val: config of the validation loader.
        test: config of the test loader.
        predict: config of the prediction loader.
        dataset: a dataset built in code for every stage, in place of the configs' ``dataset`` slot.
        train_dataset: the training stage's dataset, in place of ``dataset``.
        val_dataset: the validation stage's dataset, in place of ``dataset``.
        test_dataset: the test stage's dataset, in place of ``dataset``.
        predict_dataset: the prediction stage's dataset, in place of ``dataset``.
    """

    def __init__(
        self,
        train: Any = None,
        val: Any = None,
        test: Any = None,
        predict: Any = None,
        *,
        dataset: Any = None,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
    ) -> None:
        super().__init__()
        self.configs: dict[Stage, Any] = {"train": train, "val": val, "test": test, "predict": predict}
        own = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        self.datasets: dict[Stage, Any] = {
            stage: own[stage] if own[stage] is not None else dataset for stage in STAGES
        }
        self._epochs: dict[Stage, _Epochs] = {}
        self._pending: dict[str, Any] | None = None  # a loaded train state, for the loader not built yet
        self._last: dict[str, Any] | None = None  # the train loader's state when teardown closed it
        for stage in STAGES:
            if self.configs[stage] is None:
                # Lightning uses a stage's loader when its hook is overridden: restore the base hook,
                # so a fit without `val` skips validation and `trainer.test()` says there is no loader.
                hook = f"{stage}_dataloader"
                setattr(self, hook, getattr(pl.LightningDataModule, hook).__get__(self))

    @property
    def loaders(self) -> Mapping[Stage, Loader]:
        """The loaders built so far, by stage."""
        return MappingProxyType({stage: epochs.loader for stage, epochs in self._epochs.items()})

    def setup(self, stage: str) -> None:
        """Build the loaders ``stage`` uses (``fit``: train and val) that are not built yet."""
        for name in _STAGES_OF.get(stage, ()):
            if self.configs[name] is not None:
                self._get(name)

    def train_dataloader(self) -> Any:
        return self._get("train")

    def val_dataloader(self) -> Any:
        return self._get("val")

    def test_dataloader(self) -> Any:
        return self._get("test")

    def predict_dataloader(self) -> Any:
        return self._get("predict")

    def teardown(self, stage: str) -> None:
        """Close the loaders ``stage`` used; the next use builds them again."""
        for name in _STAGES_OF.get(stage, ()):
            epochs = self._epochs.pop(name, None)
            if epochs is None:
                continue
            if name == "train":
                self._last = self._train_state(epochs.loader)
            epochs.loader.close()

    def state_dict(self) -> dict[str, Any]:
        """The train loader's position (``Loader.state_dict()``), saved in every checkpoint."""
        epochs = self._epochs.get("train")
        state = self._train_state(epochs.loader) if epochs is not None else self._pending or self._last
        return {} if state is None else {"train": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the train loader from a checkpoint; Lightning calls it for ``ckpt_path=``."""
        state = state_dict.get("train")
        if state is None:
            return
        epochs = self._epochs.get("train")
        if epochs is None:
            self._pending = state
        else:
            epochs.load_state_dict(state)

    def _get(self, stage: Stage) -> _Epochs:
        epochs = self._epochs.get(stage)
        if epochs is None:
            loader = build_loader(self.configs[stage], dataset=self.datasets[stage])
            epochs = self._epochs[stage] = _Epochs(loader)
            if stage == "train":
                self._last = None
                if self._pending is not None:
                    state, self._pending = self._pending, None
                    epochs.load_state_dict(state)
        return epochs

    @staticmethod
    def _train_state(loader: Loader) -> dict[str, Any] | None:
        try:
            return loader.state_dict()
        except ResumeError as err:
            # A source without a state (a generator-backed dataset) must not stop the checkpoint.
            warnings.warn(
                f"train loader: {err}; checkpoints hold no data position, so a resumed fit starts "
                "the data from the beginning",
                RuntimeWarning,
                stacklevel=3,
            )
            return None


class _Epochs:
    """What Lightning iterates: the loader's passes, each one ended before the next begins.

    It is stateful like the ``Loader``, so Lightning saves its position with the fit loop and
    restores it on a mid-epoch restart; :class:`LoaderDataModule` saves the same state itself
    because Lightning restores a loader only mid-epoch, not from a checkpoint at an epoch's end.
    Loading the same state twice is harmless: it takes effect at the next pass.

    Lightning takes exactly ``len()`` batches of an epoch and never asks for the end of the pass,
    while a ``Loader`` closes an epoch at the end of its pass (the ``sharded`` kind carries its
    rollover then; the ``stream`` kind would finish the open epoch next). So a pass left at its
    last batch is ended when the next one starts, and a state saved at an epoch's end, whose
    restored pass has nothing left, has that pass run first.
    """

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self._open: Iterator[Any] | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self._epoch_delivered():
            ending = self._open if self._open is not None else iter(self.loader)
            for batch in ending:  # normally nothing is left; if len() counted short, go on, drop nothing
                self._open = itertools.chain([batch], ending)
                return self._open
        self._open = iter(self.loader)
        return self._open

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._open = None

    def _epoch_delivered(self) -> bool:
        """Whether every batch of the current epoch went out but its pass has not ended."""
        try:
            length = len(self.loader)
        except TypeError:  # unsized: Lightning reads each pass to its end itself
            return False
        return 0 < length <= self.loader.batches_in_epoch
