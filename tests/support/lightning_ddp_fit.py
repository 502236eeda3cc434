"""One rank of a real 2-process gloo fit through Lightning; ``tests/lightning/test_lightning_ddp.py`` runs it.

    torchrun --standalone --nproc_per_node=2 tests/support/lightning_ddp_fit.py PACKAGE OUT

``PACKAGE`` is ``lightning`` or ``pytorch_lightning``. After ``seed_everything(42)`` and with no
data seed in the config, it fits twice on ``Trainer(accelerator="cpu", devices=2, strategy="ddp")``:
two epochs uninterrupted, with ``ModelCheckpoint(every_n_train_steps=STOP)`` (rank 0 writes the
checkpoint), then the rest resumed from that mid-epoch checkpoint. It writes the sample ids of each
training step of each fit, for this rank, to ``OUT/PACKAGE-rankR.json``.
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

import loaderfactory.lightning

ITEMS = 24
BATCH = 3  # 4 steps an epoch on each of 2 ranks
STEPS = 8  # two epochs
STOP = 6  # mid second epoch
CONFIG = {
    "dataset": {"kind": "synthetic", "length": ITEMS, "fields": {"x": {"shape": [2]}}},
    "loader": {"kind": "torch", "batch_size": BATCH, "shuffle": True},
}


def fit(package: Any, module_class: Any, folder: Path, ckpt_path: Path | None = None) -> Any:
    class Recorder(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.seen: list[list[int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.append([int(i) for i in batch["index"]])
            return self.layer(batch["x"]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = package.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=STEPS,
        logger=False,
        callbacks=[
            package.callbacks.ModelCheckpoint(folder / "saved", every_n_train_steps=STOP, save_top_k=-1)
        ],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder,
    )
    model = Recorder()
    trainer.fit(model, datamodule=module_class(CONFIG), ckpt_path=ckpt_path)
    return model


def main() -> None:
    name, out = sys.argv[1], Path(sys.argv[2])
    warnings.simplefilter("ignore")  # Lightning's advice on workers and the cluster's CPUs
    package = importlib.import_module("lightning.pytorch" if name == "lightning" else name)
    module_class = getattr(
        loaderfactory.lightning, "LoaderDataModule" if name == "lightning" else "PLLoaderDataModule"
    )
    package.seed_everything(42)
    folder = out / name
    whole = fit(package, module_class, folder / "whole")
    (checkpoint,) = (folder / "whole" / "saved").glob(f"*step={STOP}.ckpt")
    resumed = fit(package, module_class, folder / "resumed", ckpt_path=checkpoint)
    record = {"whole": whole.seen, "resumed": resumed.seen}
    (out / f"{name}-rank{resumed.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
