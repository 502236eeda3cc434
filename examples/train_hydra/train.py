"""A minimal Hydra training app whose data loader comes from loaderfactory.

python examples/train_hydra/train.py steps=50 data.prefetch.buffer_size=4
python examples/train_hydra/train.py loaderfactory/loader@data.loader=torch_workers
"""

from __future__ import annotations

import hydra
import torch
from omegaconf import DictConfig

import loaderfactory


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def train(cfg: DictConfig) -> float:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    loss = torch.tensor(float("nan"))
    step = 0
    # hydra.utils.instantiate(cfg.data) does the same; build_loader validates first either way.
    with loaderfactory.build_loader(cfg.data) as loader:
        while step < cfg.steps:
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step == cfg.steps:
                    break
        print(f"trained {step} steps on {len(loader)} batches/epoch; final loss {loss.detach().item():.4f}")
        print(f"consumer waited {loader.stats.summary()['wait_total_s']} s for data in total")
    return loss.detach().item()


if __name__ == "__main__":
    train()
