"""Lightning fits over a mixture; ``tests/lightning/test_lightning_mixture.py`` runs them.

    torchrun --standalone --nproc_per_node=W tests/support/lightning_mixture_fit.py OUT save|resume PACKAGE...

``save``: each rank fits :data:`STOP` steps of epoch 0 on ``W`` gloo processes, rank 0's
checkpoint callback saving ``OUT/PACKAGE/saved.ckpt``. ``resume``: each rank resumes that checkpoint
up to :data:`EPOCHS` epochs, with ``log_shares=True``. Either writes what the rank trained on (and,
resuming, what it logged) to ``OUT/PACKAGE/<save|resume>-rankR.json``. With ``lightning``, the same
again (under ``sized``) for a ``per_source`` mixture whose sources have their own global batch
(:func:`sized_config`), its per-rank batch size following the world size.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

import loaderfactory
import loaderfactory.lightning

BATCH = 4
LENGTH = 96  # 12 steps an epoch on 2 ranks, 8 on 3
STOP = 5  # steps of epoch 0 on 2 ranks before the checkpoint: 40 of its 96 draws
EPOCHS = 3
PACKAGES = ("lightning", "pytorch_lightning")
SOURCES = (("web", 37, 1), ("code", 23, 2), ("books", 11, 3))
"""Name, samples and seed of each synthetic source."""
FIXED = {"web": 0.5, "code": 0.3, "books": 0.2}
GLOBAL_BATCHES = {"web": 6, "code": 12, "books": 18}
"""Each source's global batch in :func:`sized_config`: each splits evenly over 2 and 3 ranks."""
SIZED_STEPS = 12


def config(scheduled: bool = True) -> dict[str, Any]:
    """A mixture of :data:`SOURCES`, :data:`LENGTH` samples an epoch, read by a shuffled torch loader
    of :data:`BATCH`; ``scheduled``: weights going linearly from web-heavy to books-heavy over the
    first 160 samples of the run (into epoch 1), else fixed at :data:`FIXED`."""
    sources: dict[str, Any] = {
        name: {
            "dataset": {"kind": "synthetic", "length": size, "seed": seed, "fields": {"x": {"shape": [1]}}}
        }
        for name, size, seed in SOURCES
    }
    dataset = {
        "kind": "mixture",
        "sources": sources,
        "stop": {"samples": LENGTH},
        "block": 16,
        "source_key": "source",
    }
    if scheduled:
        dataset["interpolate"] = "linear"
        dataset["weights"] = [
            {"at": 0, "weights": {"web": 0.7, "code": 0.2, "books": 0.1}},
            {"at": 160, "weights": {"web": 0.2, "code": 0.3, "books": 0.5}},
        ]
    else:
        for name, weight in FIXED.items():
            sources[name]["weight"] = weight
    loader = {"kind": "torch", "batch_size": BATCH, "shuffle": True, "balance": "uneven"}
    return {"dataset": dataset, "loader": loader, "seed": 5}


def sized_config(world: int) -> dict[str, Any]:
    """:data:`SOURCES` with fixed weights, ``per_source``, each with its :data:`GLOBAL_BATCHES`,
    :data:`SIZED_STEPS` global steps an epoch, on ``world`` ranks."""
    made = config(scheduled=False)
    for name, size in GLOBAL_BATCHES.items():
        made["dataset"]["sources"][name]["global_batch"] = size
    made["dataset"].update(batching="per_source", global_batch=6, stop={"steps": SIZED_STEPS}, block=4)
    made["loader"] = {"kind": "torch", "batch_size": 6 // world, "shuffle": True}
    return made


def mixture(scheduled: bool = True) -> Any:
    """The ``MixtureDataset`` of :func:`config`, built as a loader builds it."""
    with loaderfactory.build_loader(config(scheduled)) as loader:
        return loader.dataset


def sized_mixture() -> Any:
    """The ``MixtureDataset`` of :func:`sized_config` (the same at any world size)."""
    with loaderfactory.build_loader(sized_config(1)) as loader:
        return loader.dataset


def draws(dataset: Any, epoch: int, positions: range | None = None) -> collections.Counter[tuple[str, int]]:
    """(source name, sample index) of ``positions`` (the whole epoch) of ``epoch``, from ``locate``."""
    located = (dataset.locate(k, epoch=epoch) for k in positions or range(len(dataset)))
    return collections.Counter((dataset.names[source], index) for source, index in located)


def classes(package_name: str) -> tuple[Any, Any]:
    """The Lightning package (``lightning.pytorch`` or ``pytorch_lightning``) and its data module class."""
    package = importlib.import_module("lightning.pytorch" if package_name == "lightning" else package_name)
    name = "LoaderDataModule" if package_name == "lightning" else "PLLoaderDataModule"
    return package, getattr(loaderfactory.lightning, name)


def recorder(package: Any) -> Any:
    class Recorder(package.LightningModule):  # type: ignore[misc,name-defined]
        """Records, per epoch, the (source, index) of every sample it trains on; logs its loss."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.epochs: dict[int, list[list[Any]]] = {}
            self.sizes: dict[int, list[int]] = {}

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.sizes.setdefault(self.current_epoch, []).append(len(batch["index"]))
            seen = self.epochs.setdefault(self.current_epoch, [])
            sources = batch.get("source", [None] * len(batch["index"]))  # None: a dataset of no mixture
            seen += [[s, int(i)] for s, i in zip(sources, batch["index"], strict=True)]
            loss = self.layer(batch["x"]).sum()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Recorder()


def recording_logger(package: Any) -> Any:
    class Recording(package.loggers.Logger):  # type: ignore[misc,name-defined]
        """Keeps every ``log_metrics`` call's metrics, on every rank."""

        def __init__(self) -> None:
            super().__init__()
            self.records: list[dict[str, float]] = []

        @property
        def name(self) -> str:
            return "recording"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.records.append(dict(metrics))

    return Recording()


def trainer(package: Any, folder: Path, world: int, **options: Any) -> Any:
    """A quiet CPU trainer on ``world`` processes (``ddp`` over gloo when more than one)."""
    extra = {"strategy": "ddp"} if world > 1 else {}
    return package.Trainer(
        accelerator="cpu",
        devices=world,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=folder,
        **extra,
        **options,
    )


def save(package_name: str, folder: Path, world: int, made: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fits :data:`STOP` steps of ``made`` (:func:`config`) on ``world`` processes, saving
    ``folder/saved.ckpt``: what this rank trained on (``epochs``) and its batches' sizes."""
    package, module_class = classes(package_name)
    model = recorder(package)
    # Saved by the callback at the step's end, as a checkpoint of a fit going on would be.
    saving = package.callbacks.ModelCheckpoint(folder, "saved", every_n_train_steps=STOP, save_top_k=-1)
    fit = trainer(package, folder, world, max_steps=STOP, callbacks=[saving], logger=False)
    fit.fit(model, datamodule=module_class(made or config()))
    return {"epochs": model.epochs, "sizes": model.sizes}


def resume_sized(package_name: str, saved: Path, folder: Path, world: int) -> dict[str, Any]:
    """Resumes ``saved`` (a fit of :func:`sized_config`) on ``world`` processes up to :data:`EPOCHS`
    epochs: what this rank trained on and its batches' sizes."""
    package, module_class = classes(package_name)
    model = recorder(package)
    fit = trainer(package, folder, world, max_epochs=EPOCHS, logger=False, enable_checkpointing=False)
    fit.fit(model, datamodule=module_class(sized_config(world)), ckpt_path=saved)
    return {"epochs": model.epochs, "sizes": model.sizes}


def resume(package_name: str, saved: Path, folder: Path, world: int) -> dict[str, Any]:
    """Resumes ``saved`` on ``world`` processes up to :data:`EPOCHS` epochs, logging the shares at
    every step: what this rank trained on (``epochs``) and the share metrics it logged (``logged``)."""
    package, module_class = classes(package_name)
    model, logger = recorder(package), recording_logger(package)
    fit = trainer(
        package,
        folder,
        world,
        max_epochs=EPOCHS,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
    )
    fit.fit(model, datamodule=module_class(config(), log_shares=True), ckpt_path=saved)
    logged = [{k: v for k, v in r.items() if k.startswith("mixture/")} for r in logger.records]
    return {"epochs": model.epochs, "logged": logged}


def main() -> None:
    out, mode, packages = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    warnings.simplefilter("ignore")  # Lightning's advice on workers, logging intervals and the CPUs
    world = int(os.environ["WORLD_SIZE"])
    for package_name in packages:
        here = out / package_name
        sized = here / "sized"
        if mode == "save":
            record = save(package_name, here, world)
            if package_name == "lightning":
                record["sized"] = save(package_name, sized, world, sized_config(world))
        else:
            record = resume(package_name, here / "saved.ckpt", here / "resumed", world)
            if package_name == "lightning":
                record["sized"] = resume_sized(package_name, sized / "saved.ckpt", sized / "resumed", world)
        (here / f"{mode}-rank{os.environ['RANK']}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
