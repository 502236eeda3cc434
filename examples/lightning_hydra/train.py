"""A Lightning training app in the lightning-hydra-template's shape, its data from loaderfactory.

python examples/lightning_hydra/train.py
python examples/lightning_hydra/train.py data.batch_size=16 trainer.max_epochs=1
python examples/lightning_hydra/train.py -m data.batch_size=4,8
python examples/lightning_hydra/train.py ckpt_path=/path/to/outputs/.../checkpoints/last.ckpt

Each run writes ``seen.json`` in its output folder: the sample ids of every training step, so a fit
resumed from a mid-epoch checkpoint can be compared with an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def train(cfg: DictConfig) -> float:
    L.seed_everything(cfg.seed, workers=True)
    data = hydra.utils.instantiate(cfg.data)  # every stage config is validated here
    model = hydra.utils.instantiate(cfg.model)
    callbacks = [hydra.utils.instantiate(c) for c in cfg.get("callbacks", {}).values()]
    trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks)
    trainer.fit(model, datamodule=data, ckpt_path=cfg.ckpt_path)
    Path(HydraConfig.get().runtime.output_dir, "seen.json").write_text(json.dumps(model.seen))
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    if cfg.test:
        trainer.test(model, datamodule=data, ckpt_path=None)
    print(
        f"trained {len(model.seen)} steps of batch size {data.batch_size}; val/loss {metrics.get('val/loss')}"
    )
    return metrics.get("val/loss", float("nan"))  # what an Optuna sweep would minimise


if __name__ == "__main__":
    train()
