"""Image files for the image tests: a class-folder tree of small JPEGs, and a dataset reading it whole
(``image_data.JpegFolder`` is importable by the command run from tests/support/ as a ``_target_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset


def photo(seed: int, height: int, width: int) -> np.ndarray:
    """An RGB uint8 picture that compresses like a photo: smooth gradients, a few discs, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = (
        rng.uniform(0, 255, 3) + rng.uniform(-1, 1, 3) * x[..., None] + rng.uniform(-1, 1, 3) * y[..., None]
    )
    for _ in range(3):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(3, max(4, height / 3))
        base[(y - cy) ** 2 + (x - cx) ** 2 < r**2] = rng.uniform(0, 255, 3)
    return np.clip(base + rng.normal(0, 4, base.shape), 0, 255).astype(np.uint8)


def write_jpeg_folder(
    root: Path, count: int, classes: int = 4, size: tuple[int, int] = (48, 64)
) -> list[Path]:
    """``count`` JPEGs in ``root/class_<c>/`` (quality 90, every fifth one grayscale), sorted by path."""
    from PIL import Image

    for i in range(count):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(photo(i, *size))
        (image.convert("L") if i % 5 == 4 else image).save(folder / f"{i:04d}.jpg", quality=90)
    return jpeg_files(root)


def jpeg_files(root: Path) -> list[Path]:
    return sorted(root.glob("class_*/*.jpg"))


class JpegFolder(Dataset[dict[str, Any]]):
    """Item ``i``: the bytes of the ``i``-th JPEG under ``root`` (sorted), its class, and ``i``."""

    def __init__(self, root: str) -> None:
        self.files = jpeg_files(Path(root))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path = self.files[i]
        return {"image": path.read_bytes(), "label": int(path.parent.name.split("_")[1]), "id": i}
