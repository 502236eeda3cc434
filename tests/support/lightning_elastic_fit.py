"""Lightning fits saved at one world size and resumed at another;
``tests/lightning/test_lightning_elastic.py`` runs it.

    torchrun --standalone --nproc_per_node=2 tests/support/lightning_elastic_fit.py OUT PACKAGE-DATA...

Every scenario (``lightning-shards``, say) is a (package, data) pair: ``lightning`` or
``pytorch_lightning``, and the synthetic dataset or tar shards (the ``shards`` kind) read by the
``torch`` loader kind, or the shards read by the ``sharded`` loader kind (``sharded``). Under torchrun
each rank, for every scenario, saves a fit stopped after :data:`STOP` steps of epoch 0 (``save``)
and resumes the checkpoint a one-process fit saved (``resume``, from ``OUT/<scenario>/1/saved.ckpt``),
writing to ``OUT/<scenario>/2/rankR.json`` what it trained on. The test runs :func:`save` and
:func:`resume` in its own process for world size 1.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

import loaderfactory.lightning

ITEMS = 24
BATCH = 2  # 12 steps an epoch on one rank, 6 on each of two
STOP = 4  # steps of epoch 0 before the checkpoint
EPOCHS = 3
SHARDS = [7, 5, 8, 4]
"""Samples per tar shard: 24, the ids run on from shard to shard."""
PACKAGES = ("lightning", "pytorch_lightning")
DATA = ("synthetic", "shards", "sharded")
SCENARIOS = [(package, data) for package in PACKAGES for data in DATA]


def config(data: str, shards: Path) -> dict[str, Any]:
    """A shuffled torch loader of batches of :data:`BATCH` over ``data``; ``shards``: the tars' folder."""
    loader = {"kind": "sharded" if data == "sharded" else "torch", "batch_size": BATCH, "shuffle": True}
    if data == "synthetic":
        dataset = {"kind": "synthetic", "length": ITEMS, "fields": {"x": {"shape": [2]}}}
    else:
        dataset = {"kind": "shards", "urls": f"{shards}/"}
    return {"dataset": dataset, "loader": loader, "seed": 5}


def ids(batch: Any) -> list[int]:
    """The sample ids of a batch: the synthetic dataset's ``index``, a shard sample's ``cls``."""
    return [int(i) for i in batch["index" if "index" in batch else "cls"]]


def _classes(package_name: str) -> tuple[Any, Any]:
    package = importlib.import_module("lightning.pytorch" if package_name == "lightning" else package_name)
    name = "LoaderDataModule" if package_name == "lightning" else "PLLoaderDataModule"
    return package, getattr(loaderfactory.lightning, name)


def _recorder(package: Any) -> Any:
    class Recorder(package.LightningModule):  # type: ignore[misc,name-defined]
        """Records, per epoch, the ids of each step, its ``batch_idx`` and the total the bar shows."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.epochs: dict[int, dict[str, Any]] = {}

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen = self.epochs.setdefault(self.current_epoch, {"ids": [], "last": 0, "totals": []})
            seen["ids"] += ids(batch)
            seen["last"] = batch_idx
            seen["totals"].append(self.trainer.num_training_batches)
            return self.layer(torch.ones(1, 1)).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Recorder()


def _trainer(package: Any, folder: Path, world: int, **options: Any) -> Any:
    extra = {"strategy": "ddp"} if world > 1 else {}
    return package.Trainer(
        accelerator="cpu",
        devices=world,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=folder,
        **extra,
        **options,
    )


def save(package_name: str, data: str, shards: Path, folder: Path, world: int) -> dict[str, Any]:
    """Fits :data:`STOP` steps on ``world`` processes, saves ``folder/saved.ckpt``; what this rank saw."""
    package, module_class = _classes(package_name)
    model = _recorder(package)
    # Saved by the callback, at the step's end, as a checkpoint of a fit going on would be.
    saving = package.callbacks.ModelCheckpoint(folder, "saved", every_n_train_steps=STOP, save_top_k=-1)
    trainer = _trainer(package, folder, world, max_steps=STOP, callbacks=[saving], enable_checkpointing=True)
    trainer.fit(model, datamodule=module_class(config(data, shards)))
    return model.epochs  # type: ignore[no-any-return]


def resume(
    package_name: str, data: str, shards: Path, saved: Path, folder: Path, world: int
) -> dict[str, Any]:
    """Resumes ``saved`` on ``world`` processes up to :data:`EPOCHS` epochs: what this rank trained on
    (``epochs``) and the trainer's ``reload_dataloaders_every_n_epochs`` after the fit (``reload``)."""
    package, module_class = _classes(package_name)
    model = _recorder(package)
    trainer = _trainer(package, folder, world, max_epochs=EPOCHS, enable_checkpointing=False)
    trainer.fit(model, datamodule=module_class(config(data, shards)), ckpt_path=saved)
    return {"epochs": model.epochs, "reload": trainer.reload_dataloaders_every_n_epochs}


def main() -> None:
    out, scenarios = Path(sys.argv[1]), [tuple(name.split("-")) for name in sys.argv[2:]]
    warnings.simplefilter("ignore")  # Lightning's advice on workers, logging intervals and the CPUs
    for package_name, data in scenarios:
        here = out / f"{package_name}-{data}"
        saved = save(package_name, data, out / "shards", here / "2", world=2)
        resumed = resume(
            package_name, data, out / "shards", here / "1" / "saved.ckpt", here / "1to2", world=2
        )
        rank = int(os.environ["RANK"])
        (here / "2" / f"rank{rank}.json").write_text(json.dumps({"saved": saved, "resumed": resumed}))


if __name__ == "__main__":
    main()
