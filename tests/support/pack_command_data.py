"""A small map-style dataset for ``run.mode=pack`` command tests (``test_shards_pack_command.py``).

The command imports it as ``dataset._target_=pack_command_data.PackItems`` when run from this
folder (``python -m`` puts the current folder first on the import path).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


class PackItems(Dataset[dict[str, Any]]):
    """``length`` items, every value a function of the item's ``id``: a tensor, a numpy array of a
    length that varies, a numpy scalar, an int, a float, a string and bytes (the same fields in each
    item, as Parquet needs)."""

    def __init__(self, length: int = 24) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "id": i,
            "image": torch.arange(6, dtype=torch.float32).reshape(2, 3) * i,
            "counts": np.arange(i % 5 + 1, dtype=np.int16) - i,
            "scalar": np.float64(i) / 3,
            "score": i / 7,
            "name": f"item {i} · ünïcode",
            "raw": bytes([i % 256, 0, 255]) * (i % 3 + 1),
        }
