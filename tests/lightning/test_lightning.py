"""LoaderDataModule: Lightning's loaders come from configs, and a resumed fit continues the data exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import loaderfactory

pl = pytest.importorskip("lightning.pytorch")

from lightning_helpers import lightning_imports, quiet_trainer  # noqa: E402

from loaderfactory.lightning import LoaderDataModule  # noqa: E402 - needs Lightning, checked just above

pytestmark = pytest.mark.filterwarnings(
    # Lightning 2.6 flattens its loaders with a torch pytree class that torch 2.10+ deprecates.
    "ignore:.*LeafSpec.* is deprecated:FutureWarning",
)

ITEMS = 14
BATCH = 2  # 7 batches an epoch
TRAIN = {
    "dataset": {"kind": "synthetic", "length": ITEMS, "fields": {"x": {"shape": [2]}}},
    "loader": {"kind": "torch", "batch_size": BATCH, "shuffle": True},
    "seed": 3,
}
STACK = {
    **TRAIN,
    "stream": {"kind": "epochs", "epoch_size": 5, "buffer_size": 2},
    "prefetch": {"kind": "thread", "buffer_size": 2, "repeats": 2},
}
"""Threads reading ahead, epochs of 5 batches cut from the loader's, each batch echoed twice."""
STEPS = 2 * ITEMS // BATCH  # two epochs


def _small(length: int, batch_size: int) -> dict[str, Any]:
    return {
        "dataset": {"kind": "synthetic", "length": length, "fields": {"x": {"shape": [2]}}},
        "loader": {"kind": "torch", "batch_size": batch_size},
    }


def indices(batch: Any) -> list[int]:
    return [int(i) for i in batch["index"]]


def plain_loop(config: Any, epochs: int) -> list[list[int]]:
    """The batches of ``epochs`` epochs of ``for batch in loader``, without Lightning."""
    with loaderfactory.build_loader(config) as loader:
        return [indices(batch) for _ in range(epochs) for batch in loader]


class Recorder(pl.LightningModule):
    """Trains one linear layer and records the item indices of each training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.seen: dict[str, list[list[int]]] = {"train": [], "val": [], "test": []}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen["train"].append(indices(batch))
        return self.layer(batch["x"]).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Evaluator(Recorder):
    """A Recorder that also validates, tests and predicts, recording the batches of each."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["val"].append(indices(batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["test"].append(indices(batch))
        self.test_loader = self.trainer.datamodule.loaders["test"]

    def predict_step(self, batch: Any, batch_idx: int) -> list[int]:
        return indices(batch)


def _take_checkpoint(root: Path) -> Path:
    """Move the checkpoint under ``root`` out of its folder: Lightning wants it empty to resume into."""
    (saved,) = root.glob("**/*.ckpt")
    return saved.rename(root / saved.name)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    """The training batches of a fit of two epochs that nothing interrupts."""
    model = Recorder()
    quiet_trainer(pl, tmp_path_factory.mktemp("whole"), max_epochs=2).fit(
        model, datamodule=LoaderDataModule(TRAIN)
    )
    return model.seen["train"]


def test_a_fit_sees_the_loaders_epochs_in_order(uninterrupted: list[list[int]]) -> None:
    """Lightning takes ``len()`` batches an epoch, and sees exactly what a plain loop over the loader does."""
    assert uninterrupted == plain_loop(TRAIN, epochs=2)


@pytest.mark.parametrize("stop_at", [4, 9], ids=["mid-first-epoch", "mid-second-epoch"])
def test_a_fit_resumed_mid_epoch_sees_exactly_the_rest(
    stop_at: int, uninterrupted: list[list[int]], tmp_path: Path
) -> None:
    """Stopped after ``stop_at`` steps and checkpointed, the resumed fit trains on exactly the rest."""
    first = Recorder()
    stopped = quiet_trainer(pl, tmp_path, max_steps=stop_at)
    stopped.fit(first, datamodule=LoaderDataModule(TRAIN))
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    second = Recorder()
    resumed = quiet_trainer(pl, tmp_path, max_steps=STEPS)
    resumed.fit(second, datamodule=LoaderDataModule(TRAIN), ckpt_path=tmp_path / "stopped.ckpt")
    assert first.seen["train"] == uninterrupted[:stop_at]
    assert second.seen["train"] == uninterrupted[stop_at:STEPS]


def test_a_stack_that_reads_ahead_resumes_mid_epoch_too(tmp_path: Path) -> None:
    """Buffers, a stream and echoes in the loader: the resumed fit still trains on exactly the rest."""
    whole, first, second = Recorder(), Recorder(), Recorder()
    quiet_trainer(pl, tmp_path, max_epochs=2).fit(whole, datamodule=LoaderDataModule(STACK))
    stopped = quiet_trainer(pl, tmp_path, max_steps=7)
    stopped.fit(first, datamodule=LoaderDataModule(STACK))
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    resumed = quiet_trainer(pl, tmp_path, max_steps=len(whole.seen["train"]))
    resumed.fit(second, datamodule=LoaderDataModule(STACK), ckpt_path=tmp_path / "stopped.ckpt")
    assert whole.seen["train"] == plain_loop(STACK, epochs=2)
    assert first.seen["train"] + second.seen["train"] == whole.seen["train"]


def test_a_fit_resumed_from_a_checkpoint_on_an_epochs_last_batch_starts_the_next_epoch(
    uninterrupted: list[list[int]], tmp_path: Path
) -> None:
    """A checkpoint taken after the last batch of an epoch resumes with the next epoch, not an empty one."""
    every_epoch = ITEMS // BATCH

    def saving() -> Any:
        return pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "saved", every_n_train_steps=every_epoch)

    first, second = Recorder(), Recorder()
    quiet_trainer(pl, tmp_path, checkpoints=True, callbacks=[saving()], max_steps=every_epoch).fit(
        first, datamodule=LoaderDataModule(TRAIN)
    )
    checkpoint = _take_checkpoint(tmp_path)
    resumed = quiet_trainer(pl, tmp_path, checkpoints=True, callbacks=[saving()], max_steps=STEPS)
    resumed.fit(second, datamodule=LoaderDataModule(TRAIN), ckpt_path=checkpoint)
    assert first.seen["train"] + second.seen["train"] == uninterrupted[:STEPS]


def test_an_epoch_based_fit_resumed_from_its_end_of_epoch_checkpoint_continues_the_order(
    uninterrupted: list[list[int]], tmp_path: Path
) -> None:
    """Lightning's default checkpoint (at an epoch's end) resumes the shuffle at the next epoch's order."""
    first, second = Recorder(), Recorder()
    quiet_trainer(pl, tmp_path, checkpoints=True, max_epochs=1).fit(first, datamodule=LoaderDataModule(TRAIN))
    checkpoint = _take_checkpoint(tmp_path)
    resumed = quiet_trainer(pl, tmp_path, checkpoints=True, max_epochs=2)
    resumed.fit(second, datamodule=LoaderDataModule(TRAIN), ckpt_path=checkpoint)
    assert first.seen["train"] + second.seen["train"] == uninterrupted


def test_val_test_and_predict_loaders_are_built_from_their_configs_and_closed(tmp_path: Path) -> None:
    """Each stage iterates the loader of its own config; teardown closes it."""
    val, test, predict = _small(6, 3), _small(5, 2), _small(4, 4)
    module = LoaderDataModule(TRAIN, val=val, test=test, predict=predict)
    model = Evaluator()
    runner = quiet_trainer(pl, tmp_path, max_epochs=1)
    runner.fit(model, datamodule=module)
    assert model.seen["val"] == plain_loop(val, epochs=1)
    runner.test(model, datamodule=module)
    assert model.seen["test"] == plain_loop(test, epochs=1)
    assert runner.predict(model, datamodule=module) == plain_loop(predict, epochs=1)
    assert dict(module.loaders) == {}
    with pytest.raises(RuntimeError, match="closed"):
        iter(model.test_loader)


def test_a_stage_without_a_config_has_no_loader(tmp_path: Path) -> None:
    """Without ``val``, Lightning finds no validation loader and skips validation."""
    with pytest.warns(UserWarning, match="have no `val_dataloader`"):
        quiet_trainer(pl, tmp_path, max_steps=2).fit(Evaluator(), datamodule=LoaderDataModule(TRAIN))


class Items(Dataset[dict[str, Any]]):
    """``length`` items ``{"x", "index"}`` built in code rather than by a config."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": torch.full((2,), float(index)), "index": index}


def test_datasets_built_in_code_take_the_place_of_the_dataset_slot(tmp_path: Path) -> None:
    """``dataset=`` feeds every stage, ``val_dataset=`` replaces it for validation."""
    batches = {"loader": {"kind": "torch", "batch_size": 3}}
    module = LoaderDataModule(batches, val=batches, dataset=Items(6), val_dataset=Items(4))
    model = Evaluator()
    quiet_trainer(pl, tmp_path, max_epochs=1).fit(model, datamodule=module)
    assert model.seen["train"] == [[0, 1, 2], [3, 4, 5]]
    assert model.seen["val"] == [[0, 1, 2], [3]]


def test_a_restored_loader_counts_the_whole_epoch_and_yields_the_rest() -> None:
    """``len()`` of a Loader restored after batch 3 is the whole epoch (7), of which it yields the last 4."""
    with loaderfactory.build_loader(TRAIN) as loader:
        batches = iter(loader)
        head = [indices(next(batches)) for _ in range(3)]
        state = json.loads(json.dumps(loader.state_dict()))
        del batches
    with loaderfactory.build_loader(TRAIN) as restored:
        restored.load_state_dict(state)
        assert len(restored) == ITEMS // BATCH
        rest = []
        for batch in restored:
            rest.append(indices(batch))
            assert len(restored) == ITEMS // BATCH
        assert len(restored) == ITEMS // BATCH
    assert head + rest == plain_loop(TRAIN, epochs=1)


def test_importing_loaderfactory_never_imports_lightning() -> None:
    """Lightning loads only with ``loaderfactory.lightning``, never with the package or a loader."""
    assert lightning_imports()["loader"] == []


class Failing(Recorder):
    """A Recorder whose training step fails at its first batch."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise RuntimeError("a failing step")


def test_the_trainers_reload_setting_is_given_back_after_a_failed_or_evaluating_resume(
    tmp_path: Path,
) -> None:
    """A resume makes the trainer read the train loader's length again; a fit that fails before the
    next epoch, or a ``validate`` from the checkpoint, leaves the user's own setting in place."""
    stopped = quiet_trainer(pl, tmp_path, max_steps=3)
    stopped.fit(Recorder(), datamodule=LoaderDataModule(TRAIN))
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")

    failing = quiet_trainer(pl, tmp_path, max_steps=STEPS, reload_dataloaders_every_n_epochs=0)
    with pytest.raises(RuntimeError, match="a failing step"):
        failing.fit(Failing(), datamodule=LoaderDataModule(TRAIN), ckpt_path=tmp_path / "stopped.ckpt")
    assert failing.reload_dataloaders_every_n_epochs == 0

    evaluating = quiet_trainer(pl, tmp_path, reload_dataloaders_every_n_epochs=0)
    data = LoaderDataModule(TRAIN, val=TRAIN)
    evaluating.validate(Evaluator(), datamodule=data, ckpt_path=tmp_path / "stopped.ckpt")
    assert evaluating.reload_dataloaders_every_n_epochs == 0
