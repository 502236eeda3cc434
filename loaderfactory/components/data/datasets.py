"""Built-in map-style datasets of dict items: ``SyntheticDataset`` and ``TensorFolderDataset``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

Item = dict[str, Any]

_DEFAULT_FIELDS: dict[str, dict[str, Any]] = {
    "image": {"shape": [3, 32, 32], "dtype": "float32"},
    "label": {"shape": [], "dtype": "int64", "high": 10},
}


class SyntheticDataset(Dataset[Item]):
    """Deterministic dict items computed from ``seed`` and the index: data without a disk.

    The same ``(seed, index)`` always gives the same item, in any process and any order, so
    tests can check exactly what a loader delivered. Floats are standard normal, integers uniform
    in ``[0, high)``, booleans fair coins.

    Args:
        length: number of items.
        fields: key → ``{"shape": [...], "dtype": "float32", "high": 10}``.
        seed: base seed.
        delay_ms: sleep per item (releases the GIL), standing in for slow storage.
    """

    def __init__(
        self,
        length: int = 1024,
        fields: Mapping[str, Mapping[str, Any]] | None = None,
        seed: int = 0,
        delay_ms: float = 0.0,
    ) -> None:
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        self.length = length
        self.fields = {k: dict(v) for k, v in (fields or _DEFAULT_FIELDS).items()}
        self.seed = seed
        self.delay_ms = delay_ms
        self._dtypes = {k: getattr(torch, str(v.get("dtype", "float32"))) for k, v in self.fields.items()}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Item:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} out of range for a dataset of {self.length} items")
        index %= self.length
        if self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        item: Item = {}
        for key, field in self.fields.items():
            shape = tuple(field.get("shape", ()))
            dtype = self._dtypes[key]
            if dtype.is_floating_point:
                item[key] = torch.randn(shape, generator=generator).to(dtype)
            elif dtype == torch.bool:
                item[key] = torch.randint(0, 2, shape, generator=generator).bool()
            else:
                item[key] = torch.randint(
                    0, int(field.get("high", 10)), shape, generator=generator, dtype=dtype
                )
        item["index"] = index
        return item


class TensorFolderDataset(Dataset[Item]):
    """A folder of ``.pt`` files, each holding one dict item, loaded lazily in sorted path order.

    Args:
        root: the folder.
        pattern: glob for the files, relative to ``root``.
        recursive: also search subfolders.
        preprocess: applied to each item after loading (e.g. a transform from the registry).
    """

    def __init__(
        self,
        root: str | Path,
        pattern: str = "*.pt",
        recursive: bool = False,
        preprocess: Callable[[Item], Item] | None = None,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"tensor_folder: {str(self.root)!r} is not a folder")
        found = self.root.rglob(pattern) if recursive else self.root.glob(pattern)
        self.files = sorted(p for p in found if p.is_file())
        if not self.files:
            raise FileNotFoundError(f"tensor_folder: no files match {pattern!r} in {str(self.root)!r}")
        self.preprocess = preprocess

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Item:
        path = self.files[index]
        item = torch.load(path, weights_only=True)
        if not isinstance(item, dict):
            raise TypeError(f"{path}: holds a {type(item).__name__}; tensor_folder files must hold a dict")
        if self.preprocess is not None:
            item = self.preprocess(item)
        return dict(item)
