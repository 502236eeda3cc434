"""The data module's behaviour, shared by the ``lightning`` and the ``pytorch_lightning`` class.

It imports no Lightning: each package's class mixes this into that package's ``LightningDataModule``
(Lightning's trainer accepts only its own package's data modules).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from loaderfactory.errors import ConfigError, ResumeError
from loaderfactory.factory import build_loader
from loaderfactory.intake import at_root
from loaderfactory.lightning._epochs import Epochs
from loaderfactory.lightning._reread import LengthReread
from loaderfactory.lightning._shares import ShareLogging, share_logger_for
from loaderfactory.lightning._stages import (
    STAGES,
    Stage,
    ignored_shared,
    own_settings,
    plain_for_hparams,
    resolve,
    take_in_stages,
    unknown_arguments,
)
from loaderfactory.loader import Loader

_STAGES_OF: dict[str, tuple[Stage, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("predict",),
}
"""Lightning's ``stage`` argument of ``setup``/``teardown`` → the loaders it uses."""


class DataModuleCore:
    """One ``Loader`` per stage, built from a config; a resumed fit continues the data exactly.

    Pass it to ``Trainer.fit(model, datamodule=...)`` (or ``validate``/``test``/``predict``). Every
    stage config is validated here, when the module is built, and all problems are raised in one
    :class:`~loaderfactory.ConfigError`. Each stage's loader is built on first use (``setup`` or its
    ``*_dataloader`` hook) and closed by ``teardown``. Lightning takes ``len()`` batches per epoch;
    the loader's epochs follow one another as in ``for epoch ...: for batch in loader``. The train
    loader's position goes into every checkpoint (:meth:`state_dict`), so a fit resumed with
    ``ckpt_path=`` sees exactly the batches an uninterrupted fit would. A stage without a config has
    no loader, as if its hook were not defined. With the trainer's ``overfit_batches``, the train and
    val loaders replay their first batches every epoch.

    Args:
        train: config of the training loader: whatever ``build_loader`` takes (a dict, a YAML path,
            an OmegaConf node such as ``cfg.data.train``, a ``LoaderSpec``); ``None``: no such stage.
        val: config of the validation loader.
        test: config of the test loader.
        predict: config of the prediction loader.
        batch_size: items per batch of every stage whose config sets none (Lightning's tuner sets it).
        num_workers: worker processes of every stage whose config sets none.
        pin_memory: pin batches in every stage whose config does not say.
        config_path: where the stage configs sit in the app's config, for error paths; ``None``:
            taken from OmegaConf nodes (``data`` for ``cfg.data.train``), else none (``train.loader``).
        dataset: a dataset built in code for every stage, in place of the configs' ``dataset`` slot.
        train_dataset: the training stage's dataset, in place of ``dataset``.
        val_dataset: the validation stage's dataset, in place of ``dataset``.
        test_dataset: the test stage's dataset, in place of ``dataset``.
        predict_dataset: the prediction stage's dataset, in place of ``dataset``.
        log_shares: while fitting over a mixture (``dataset: {kind: mixture}``), log each source's
            share of the samples the epoch drew so far and its target share after every training
            step, as ``mixture/<name>/share`` and ``mixture/<name>/target`` (through a callback the
            module adds to the trainer for the fit); costs well under a millisecond a step.

    Raises:
        ConfigError: every problem of every stage config, named from the app's root; an argument the
            module does not take (``data.batch_sise``), with the closest one it does.

    Warns:
        UserWarning: once, naming each stage that sets its own value of ``batch_size``,
            ``num_workers`` or ``pin_memory`` other than the module's, which it then does not use;
            with ``log_shares``, when a fit starts over a train dataset that is no mixture.
    """

    trainer: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """An argument ``__init__`` does not take is a ConfigError at its path in the app's config
        (``data.batch_sise`` from ``+data.batch_sise=64``), not a TypeError naming this class."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            allowed = [p.name for p in parameters if p.kind in keywords and p.name != "self"]
            error = unknown_arguments(kwargs, allowed, cls.__name__)
            if error is not None:
                raise error
        return super().__new__(cls)

    def __init__(
        self,
        train: Any = None,
        val: Any = None,
        test: Any = None,
        predict: Any = None,
        *,
        batch_size: int | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
        config_path: str | None = None,
        dataset: Any = None,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        log_shares: bool = False,
    ) -> None:
        super().__init__()
        configs: dict[Stage, Any] = {"train": train, "val": val, "test": test, "predict": predict}
        own = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        self.datasets: dict[Stage, Any] = {
            stage: own[stage] if own[stage] is not None else dataset for stage in STAGES
        }
        with_dataset = {stage: self.datasets[stage] is not None for stage in STAGES}
        self._stages, self._root = take_in_stages(configs, with_dataset, config_path)
        self._shared: dict[str, Any] = {"batch_size": batch_size, "num_workers": num_workers}
        self._shared["pin_memory"] = pin_memory
        self.specs = resolve(self._stages, self._shared, self._root, flags={"log_shares": log_shares})
        self.log_shares = log_shares
        ignored = ignored_shared(self._stages, self._shared, self._root)
        if ignored:
            warnings.warn(ignored, UserWarning, stacklevel=2)
        hparams: dict[str, Any] = {**self._shared, "log_shares": log_shares}
        hparams.update({stage: plain_for_hparams(config) for stage, config in self._stages.items()})
        self.save_hyperparameters(hparams)  # type: ignore[attr-defined]  # Lightning's mixin, beside this one
        self._epochs: dict[Stage, Epochs] = {}
        self._pending: dict[str, Any] | None = None  # a loaded train state, for the loader not built yet
        self._last: dict[str, Any] | None = None  # the train loader's state when teardown closed it
        self._resized = False  # whether batch_size was set after construction
        self._reread = LengthReread()
        for stage in STAGES:
            if stage not in self.specs:
                # Lightning uses a stage's loader when its hook is overridden: restore the hook of the
                # package's LightningDataModule (the class after this core in the MRO), so a fit
                # without `val` skips validation and `trainer.test()` says there is no loader.
                hook = f"{stage}_dataloader"
                setattr(self, hook, getattr(super(), hook))

    @property
    def batch_size(self) -> int | None:
        """Items per batch of the stages whose config sets none; setting it rebuilds their loaders."""
        value: int | None = self._shared["batch_size"]
        return value

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        own = own_settings(self._stages, "batch_size")
        if own and len(own) == len(self._stages):
            raise ConfigError(
                f"{self._root + '.' if self._root else ''}batch_size: every stage sets its own "
                f"({', '.join(own)}), so setting the module's changes no loader; remove those to let "
                "the module's (and Lightning's tuner) decide"
            )
        self.specs = resolve(self._stages, {**self._shared, "batch_size": value}, self._root)
        self._shared["batch_size"] = value
        self._resized = True
        self.hparams["batch_size"] = value  # type: ignore[attr-defined]  # Lightning's mixin
        for stage in list(self._epochs):  # built with the old size: the next use builds them again
            self._epochs.pop(stage).loader.close()
        self._last = None

    @property
    def loaders(self) -> Mapping[Stage, Loader]:
        """The loaders built so far, by stage."""
        return MappingProxyType({stage: epochs.loader for stage, epochs in self._epochs.items()})

    def setup(self, stage: str) -> None:
        """Build the loaders ``stage`` uses (``fit``: train and val) that are not built yet."""
        for name in _STAGES_OF.get(stage, ()):
            if name in self.specs:
                self._get(name)
        if stage == "fit" and self.log_shares and "train" in self.specs:
            self._add_share_logger()

    def train_dataloader(self) -> Any:
        epochs = self._get("train")
        self._reread.on_read()
        return epochs

    def val_dataloader(self) -> Any:
        return self._get("val")

    def test_dataloader(self) -> Any:
        return self._get("test")

    def predict_dataloader(self) -> Any:
        return self._get("predict")

    def teardown(self, stage: str) -> None:
        """Close the loaders ``stage`` used; the next use builds them again."""
        if stage == "fit":
            self._reread.end()
            self._remove_share_logger()
        for name in _STAGES_OF.get(stage, ()):
            epochs = self._epochs.pop(name, None)
            if epochs is None:
                continue
            if name == "train":
                self._last = self._train_state(epochs.loader)
            epochs.loader.close()

    def on_exception(self, exception: BaseException) -> None:
        """A fit that failed gives the trainer its own ``reload_dataloaders_every_n_epochs`` back
        (Lightning calls no ``teardown`` then), and takes the share logger off it."""
        self._reread.end()
        self._remove_share_logger()

    def state_dict(self) -> dict[str, Any]:
        """The train loader's position (``Loader.state_dict()``), saved in every checkpoint."""
        epochs = self._epochs.get("train")
        state = self._train_state(epochs.loader) if epochs is not None else self._pending or self._last
        return {} if state is None else {"train": state, "batch_size": self.batch_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the train loader from a checkpoint; Lightning calls it for ``ckpt_path=``.

        A position saved before ``batch_size`` was set on this module (Lightning's tuner saves one
        before its search and restores it after) is for other batches: the train loader starts over.
        """
        state = state_dict.get("train")
        if state is None or (self._resized and state_dict.get("batch_size") != self.batch_size):
            return
        epochs = self._epochs.get("train")
        if epochs is None:
            self._pending = state
        else:
            epochs.load_state_dict(state)
        # The resumed epoch's length may not be a whole epoch's (at another world size).
        trainer = getattr(self, "trainer", None)
        if _fitting(trainer):
            self._reread.request(trainer)

    def _get(self, stage: Stage) -> Epochs:
        epochs = self._epochs.get(stage)
        if epochs is None:
            epochs = self._epochs[stage] = Epochs(self._build(stage))
            if stage == "train":
                self._last = None
                if self._pending is not None:
                    state, self._pending = self._pending, None
                    epochs.load_state_dict(state)
            if stage in ("train", "val") and self._overfitting():
                self._replay(stage, epochs)
        return epochs

    def _add_share_logger(self) -> None:
        """Add the share logger in front of the trainer's callbacks (before a checkpoint's, which may
        monitor a share), or warn that the train dataset has no shares to log."""
        callbacks = getattr(getattr(self, "trainer", None), "callbacks", None)
        if not isinstance(callbacks, list) or any(isinstance(c, ShareLogging) for c in callbacks):
            return  # no trainer (the module used by itself), or added already
        dataset = self._epochs["train"].loader.dataset
        if not callable(getattr(dataset, "shares", None)):
            warnings.warn(
                f"{self._root + '.' if self._root else ''}log_shares: the train dataset is a "
                f"{type(dataset).__name__}, not a mixture, so there are no shares to log; "
                "set log_shares to false, or train on a dataset of kind mixture",
                UserWarning,
                stacklevel=3,
            )
            return
        callbacks.insert(0, share_logger_for(type(self)))

    def _remove_share_logger(self) -> None:
        callbacks = getattr(getattr(self, "trainer", None), "callbacks", None)
        if isinstance(callbacks, list):
            callbacks[:] = [c for c in callbacks if not isinstance(c, ShareLogging)]

    def _overfitting(self) -> bool:
        overfit: float = getattr(self.trainer, "overfit_batches", 0.0)
        return overfit > 0

    def _build(self, stage: Stage) -> Loader:
        try:
            return build_loader(self.specs[stage], dataset=self.datasets[stage])
        except ConfigError as err:
            raise at_root(self._stages[stage].root, err) from err.__cause__

    def _replay(self, stage: Stage, epochs: Epochs) -> None:
        """Lightning's overfit mode: the same first batches every epoch, as it does for a DataLoader."""
        try:
            epochs.replay()
        except ResumeError as err:
            warnings.warn(
                f"{stage} loader: overfit_batches replays the first batches of each epoch from the "
                f"loader's saved position, but {err}; each epoch sees other batches",
                RuntimeWarning,
                stacklevel=3,
            )

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


def _fitting(trainer: Any) -> bool:
    """Whether ``trainer`` is running ``fit`` (not ``validate``/``test`` from a checkpoint)."""
    function = getattr(getattr(trainer, "state", None), "fn", None)
    return str(getattr(function, "value", function)) == "fit"
