"""The example's model: one linear layer that records which samples each training step saw."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch


class TinyRegressor(L.LightningModule):
    """Regresses ``y`` on ``x``; ``seen`` holds each training step's sample ids (``batch["index"]``)."""

    def __init__(self, in_features: int, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(in_features, 1)
        self.seen: list[list[int]] = []

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.layer(batch["x"]).squeeze(-1), batch["y"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append(batch["index"].tolist())
        loss = self._loss(batch)
        self.log("train/loss", loss, batch_size=len(batch["y"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), batch_size=len(batch["y"]))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("test/loss", self._loss(batch), batch_size=len(batch["y"]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])
