"""LoaderDataModule as Lightning apps and templates use it: both packages, shared arguments, hparams,
the tuner, errors at construction named from the app's root, and ``overfit_batches``."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
old_pl = pytest.importorskip("pytorch_lightning")
hydra_utils = pytest.importorskip("hydra.utils")

from hydra import compose, initialize_config_dir  # noqa: E402 - after the skips above
from hydra.errors import InstantiationException  # noqa: E402
from lightning_helpers import lightning_imports, quiet_trainer  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from loaderfactory import ConfigError  # noqa: E402
from loaderfactory.lightning import LoaderDataModule, PLLoaderDataModule  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    # Lightning 2.6 flattens its loaders with a torch pytree class that torch 2.10+ deprecates.
    "ignore:.*LeafSpec.* is deprecated:FutureWarning",
    # A fit of a few steps on CPU: Lightning's advice on workers and logging intervals does not apply.
    "ignore:.*does not have many workers:UserWarning",
    "ignore:.*log_every_n_steps:UserWarning",
)


def _data(length: int, **loader: Any) -> dict[str, Any]:
    return {
        "dataset": {"kind": "synthetic", "length": length, "fields": {"x": {"shape": [2]}}},
        "loader": {"kind": "torch", **loader},
        "seed": 5,
    }


def _recorder(package: Any) -> Any:
    class Recorder(package.LightningModule):
        """Records the item indices of each training batch, by epoch."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.epochs: list[list[list[int]]] = []

        def on_train_epoch_start(self) -> None:
            self.epochs.append([])

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.epochs[-1].append([int(i) for i in batch["index"]])
            return self.layer(batch["x"]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Recorder()


def _flat(epochs: list[list[list[int]]]) -> list[list[int]]:
    return [batch for epoch in epochs for batch in epoch]


STAGES = ("train", "val", "test", "predict")


def is_overridden(hook: str, module: Any, package: Any) -> bool:
    """Lightning's own test of whether a data module defines a stage's loader."""
    helpers = importlib.import_module(f"{package.__name__}.utilities.model_helpers")
    return bool(helpers.is_overridden(hook, module, parent=package.LightningDataModule))


PACKAGES = [(pl, LoaderDataModule), (old_pl, PLLoaderDataModule)]


@pytest.mark.parametrize(("package", "module_class"), PACKAGES, ids=["lightning", "pytorch_lightning"])
def test_each_packages_trainer_fits_resumes_and_skips_stages_without_config(
    package: Any, module_class: Any, tmp_path: Path
) -> None:
    """Each package's class fits with that package's trainer, resumes mid-epoch and has no val loader."""
    whole, first, second = _recorder(package), _recorder(package), _recorder(package)
    module = module_class(_data(12), batch_size=3)
    hooks = {stage: is_overridden(f"{stage}_dataloader", module, package) for stage in STAGES}
    assert hooks == {"train": True, "val": False, "test": False, "predict": False}
    quiet_trainer(package, tmp_path, max_epochs=2).fit(whole, datamodule=module)
    stopped = quiet_trainer(package, tmp_path, max_steps=5)
    stopped.fit(first, datamodule=module_class(_data(12), batch_size=3))
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    resumed = quiet_trainer(package, tmp_path, max_steps=8)
    resumed.fit(second, datamodule=module_class(_data(12), batch_size=3), ckpt_path=tmp_path / "stopped.ckpt")
    assert [len(epoch) for epoch in whole.epochs] == [4, 4]
    assert _flat(first.epochs) + _flat(second.epochs) == _flat(whole.epochs)


def test_shared_arguments_apply_to_every_stage_that_sets_none_of_its_own() -> None:
    """``batch_size``, ``num_workers``, ``pin_memory`` fill the stages' loaders; a stage's own value wins,
    and one warning says which of the module's values that stage does not use."""
    with pytest.warns(UserWarning) as caught:
        module = LoaderDataModule(
            _data(8), val=_data(8, batch_size=3, num_workers=1), batch_size=4, num_workers=2, pin_memory=True
        )
    assert [str(w.message) for w in caught] == [
        "batch_size=4 is not used by stage val: val.loader.batch_size is 3; num_workers=2 is not used "
        "by stage val: val.loader.num_workers is 1. Remove the stage's own value to have the module's "
        "apply there"
    ]
    train, val = module.specs["train"].loader, module.specs["val"].loader
    assert (train.batch_size, train.num_workers, train.pin_memory) == (4, 2, True)
    assert (val.batch_size, val.num_workers, val.pin_memory) == (3, 1, True)
    queued = LoaderDataModule(
        {"dataset": _data(8)["dataset"], "queue": {"kind": "ram"}}, batch_size=4, num_workers=1
    )
    assert (queued.specs["train"].queue.batch_size, queued.specs["train"].queue.num_workers) == (4, 1)
    plain = LoaderDataModule(_data(8)).specs["train"].loader
    assert (plain.batch_size, plain.num_workers, plain.pin_memory) == (32, 0, False)  # the spec's defaults


def test_hparams_hold_the_arguments_and_the_plain_stage_configs(tmp_path: Path) -> None:
    """``hparams`` show the shared arguments and each stage's config; checkpoints keep them."""
    node = OmegaConf.create({"data": {"train": _data(6), "size": 2}})
    node.data.train.loader.batch_size = "${data.size}"
    module = LoaderDataModule(node.data.train, num_workers=0)
    assert module.hparams["num_workers"] == 0 and module.hparams["batch_size"] is None
    assert module.hparams["train"]["loader"] == {"kind": "torch", "batch_size": 2}
    runner = quiet_trainer(pl, tmp_path, max_steps=1)
    runner.fit(_recorder(pl), datamodule=module)
    runner.save_checkpoint(tmp_path / "one.ckpt")
    saved = torch.load(tmp_path / "one.ckpt", weights_only=False)
    assert saved["datamodule_hyper_parameters"]["train"] == module.hparams["train"]


def test_the_tuner_finds_a_batch_size_and_the_fit_trains_with_it(tmp_path: Path) -> None:
    """``Tuner.scale_batch_size`` sets ``batch_size`` on the module; the next fit's batches have that size."""
    from lightning.pytorch.tuner import Tuner

    module, model = LoaderDataModule(_data(64), batch_size=2), _recorder(pl)
    runner = quiet_trainer(pl, tmp_path, max_epochs=1)
    found = Tuner(runner).scale_batch_size(
        model, datamodule=module, mode="power", max_trials=3, steps_per_trial=1
    )
    assert found == module.batch_size == module.hparams["batch_size"] == 8
    assert [len(epoch[0]) for epoch in model.epochs] == [2, 4, 8]
    model.epochs.clear()
    runner.fit(model, datamodule=module)
    assert sorted(i for batch in _flat(model.epochs) for i in batch) == list(range(64))
    assert {len(batch) for batch in _flat(model.epochs)} == {8}


def test_setting_batch_size_when_every_stage_sets_its_own_says_so() -> None:
    """Changing the module's batch size that no stage uses is an error naming the stages' own values."""
    module = LoaderDataModule(_data(8, batch_size=2), config_path="data")
    with pytest.raises(
        ConfigError, match=r"data\.batch_size: every stage sets its own \(data\.train\.loader"
    ):
        module.batch_size = 4
    with pytest.raises(ConfigError, match=r"^data\.batch_size: must be ≥ 1, got 0$"):
        LoaderDataModule(_data(8), val=_data(8), batch_size=0, config_path="data")


def test_every_stage_is_validated_at_construction_with_paths_from_the_arguments_or_nodes() -> None:
    """A bad ``test`` config fails when the module is built, beside the train's, not after the fit;
    paths start at the argument, at ``config_path``, or at the app's root for a node of its config."""
    with pytest.raises(ConfigError) as caught:
        LoaderDataModule(
            _data(8, batch_size=0), test=_data(8, drop_last=3), predict={"loader": {"kind": "torch"}}
        )
    assert caught.value.paths == ["train.loader.batch_size", "test.loader.drop_last", "predict.dataset"]
    with pytest.raises(ConfigError, match=r"^data\.val\.loader\.batch_size: must be ≥ 1"):
        LoaderDataModule(val=_data(8, batch_size=0), config_path="data")
    app = OmegaConf.create({"data": {"train": _data(8, batch_size=0)}})
    with pytest.raises(ConfigError, match=r"^data\.train\.loader\.batch_size: must be ≥ 1"):
        LoaderDataModule(app.data.train)  # a node taken from the app's config carries its path


APP = """
data:
  _target_: loaderfactory.lightning.LoaderDataModule
  _recursive_: false
  batch_size: 0
  train: {dataset: {kind: synthetic, length: 8}, loader: {kind: torch, batch_size: 0}}
  test: {dataset: {kind: synthetic, length: 8}, loader: {kind: torch, drop_last: 3}}
"""


def _instantiate(node: Any) -> Any:
    """``hydra.utils.instantiate(node)``, re-raising the loaderfactory error Hydra wraps."""
    try:
        return hydra_utils.instantiate(node)
    except InstantiationException as err:
        raise err.__cause__ if isinstance(err.__cause__, ConfigError) else err from None


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_hydra" / "configs"


def _example_data(*overrides: str) -> Any:
    """``cfg.data`` of the example app (the lightning-hydra-template's shape) run with ``overrides``."""
    with initialize_config_dir(str(EXAMPLE), version_base="1.3"):
        return compose("train", overrides=list(overrides)).data


def test_a_misspelt_argument_of_the_data_module_is_named_at_its_path_with_the_right_one() -> None:
    """``+data.batch_sise=64`` is a ConfigError at ``data.batch_sise`` suggesting ``batch_size``, not a
    TypeError naming a private class."""
    with pytest.raises(InstantiationException) as caught:
        hydra_utils.instantiate(_example_data("+data.batch_sise=64"))
    error = caught.value.__cause__
    assert isinstance(error, ConfigError) and error.paths == ["data.batch_sise"]
    assert str(error).startswith(
        "data.batch_sise: unknown argument of LoaderDataModule (got 64). Did you mean 'batch_size'? Allowed: "
    )
    with pytest.raises(ConfigError, match=r"^batch_sise: .*Did you mean 'batch_size'\?"):
        PLLoaderDataModule(_data(8), batch_sise=3)  # type: ignore[call-arg]  # the misspelling tested


def test_the_modules_batch_size_that_a_stages_loader_preset_overrides_is_said_once() -> None:
    """``data.batch_size=64`` with the ``torch`` loader preset (``batch_size: 32``) for the train stage:
    one warning names the stage and its own value; the other stages take 64."""
    data = _example_data("data.batch_size=64", "+loaderfactory/loader@data.train.loader=torch")
    with pytest.warns(UserWarning) as caught:
        module = hydra_utils.instantiate(data)
    assert [str(w.message) for w in caught] == [
        "data.batch_size=64 is not used by stage train: data.train.loader.batch_size is 32. Remove the "
        "stage's own value to have the module's apply there"
    ]
    assert [module.specs[stage].loader.batch_size for stage in ("train", "val", "test")] == [32, 64, 64]


def test_hydra_instantiate_reports_every_stage_from_the_apps_root() -> None:
    """Through ``instantiate(cfg.data)`` the paths start at the app's root: ``data.test.loader...``."""
    cfg = OmegaConf.create(APP)
    with pytest.raises(ConfigError) as caught:
        _instantiate(cfg.data)
    assert caught.value.paths == [
        "data.batch_size",
        "data.train.loader.batch_size",
        "data.test.loader.drop_last",
    ]


def test_hydras_wrapped_error_lists_the_problems_one_per_line() -> None:
    """Hydra shows the error by ``repr``: the problems stay readable, one per line, not escaped."""
    with pytest.raises(InstantiationException) as caught:
        hydra_utils.instantiate(OmegaConf.create(APP).data)
    assert "\n  - data.train.loader.batch_size: must be ≥ 1, got 0\n" in str(caught.value)
    assert "\\n" not in str(caught.value)


def test_without_recursive_false_the_error_says_to_add_it() -> None:
    """Hydra building a nested ``_target_`` first gives an error that names ``_recursive_: false``."""
    cfg = OmegaConf.create(APP)
    del cfg.data["_recursive_"], cfg.data["test"]
    cfg.data.batch_size = 2
    cfg.data.train = {"dataset": {"_target_": "torch.utils.data.TensorDataset"}}
    with pytest.raises(
        ConfigError, match=r"^data\.train\.dataset: a TensorDataset object.*add `_recursive_: false`"
    ):
        _instantiate(cfg.data)


@pytest.mark.parametrize("overfit", [2, 0.5], ids=["batches", "fraction"])
def test_overfit_batches_trains_on_the_same_batches_every_epoch(overfit: float, tmp_path: Path) -> None:
    """With ``overfit_batches``, every epoch takes the same first batches of the shuffled order."""
    model = _recorder(pl)
    module = LoaderDataModule(_data(16, shuffle=True), batch_size=4)
    quiet_trainer(pl, tmp_path, max_epochs=3, overfit_batches=overfit).fit(model, datamodule=module)
    first = model.epochs[0]
    assert len(first) == 2 and len({i for batch in first for i in batch}) == 8
    assert model.epochs == [first] * 3


def test_each_class_loads_only_its_own_lightning_package() -> None:
    """``loaderfactory.lightning`` loads no Lightning; each class loads its own package, not the other."""
    imports = lightning_imports()
    assert imports["module"] == [] and "pytorch_lightning" in imports["pl_class"]
    assert "lightning" not in imports["pl_class"]
