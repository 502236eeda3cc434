"""The quiet one-CPU ``Trainer`` the Lightning tests fit with, for either Lightning package."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def quiet_trainer(package: Any, root: Path, checkpoints: bool = False, **options: Any) -> Any:
    """``package.Trainer`` on one CPU under ``root``: no logger, progress bar, model summary or sanity
    validation; checkpoints only when asked for; ``options`` (``max_steps``, callbacks...) on top."""
    return package.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=checkpoints,
        default_root_dir=root,
        num_sanity_val_steps=0,
        **options,
    )
