"""Image files' bytes (jpg, png, webp) → uint8 tensors, channels × height × width, through Pillow.

By default an image decodes whole, in the mode it was stored in: RGB gives 3 channels, grayscale
(``L``) 1, RGBA 4, a palette image (``P``) its 1 channel of palette indices. :class:`ImageDecoding`
asks for another mode (``image.convert``) or a size:

- ``size`` (height, width): every image comes out that size, so a batch of them stacks. A JPEG is
  decoded with Pillow's ``draft()``, which has libjpeg scale it by 1/2, 1/4 or 1/8 while decoding
  (the inverse DCT computes only the pixels kept: a 4× smaller decode costs a fraction of a full
  one) to the smallest scale still at least ``size``; then every format is resized to exactly
  ``size`` with Pillow's bilinear filter (antialiased when it shrinks). The aspect ratio is not
  kept: crop in a transform first where it matters.
- ``mode``: ``"RGB"`` (3 channels: grayscale and palette images too), ``"L"`` (1; a JPEG decodes
  its luma alone), ``"RGBA"`` (4).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

PILLOW_MISSING = (
    'decoding images needs Pillow: pip install "loaderfactory[images]"; or keep their bytes with '
    "decode=False (or a decode list without the image extensions)"
)
IMAGE_MODES = ("RGB", "L", "RGBA")
"""Modes :class:`ImageDecoding` may ask for (``None``: as stored)."""


@dataclass(frozen=True)
class ImageDecoding:
    """How images decode: ``size`` (height, width) or None for as stored; ``mode`` (``"RGB"``,
    ``"L"``, ``"RGBA"``) or None for as stored."""

    size: tuple[int, int] | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        image_size(self.size)
        if self.mode is not None and self.mode not in IMAGE_MODES:
            raise ValueError(f"image_mode must be one of {', '.join(IMAGE_MODES)} or None, got {self.mode!r}")


def image_size(size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """``224`` → ``(224, 224)``; ``[h, w]`` → ``(h, w)``; None stays None. ValueError otherwise."""
    if size is None:
        return None
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"image_size must be a size ≥ 1 or [height, width] of them, got {size!r}")
    return pair[0], pair[1]


def image_tensor(data: bytes | memoryview, decoding: ImageDecoding | None = None) -> torch.Tensor:
    """The image file ``data`` as a uint8 (uint16 for 16-bit PNGs) CHW tensor, as ``decoding`` asks.

    Raises:
        ImportError: Pillow is not installed (the message says how to install it or keep bytes).
        PIL.UnidentifiedImageError, OSError: ``data`` is not an image file Pillow reads.
    """
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError(PILLOW_MISSING) from err
    decoding = decoding or ImageDecoding()
    with Image.open(io.BytesIO(data)) as stored:
        image: Any = stored
        box = None
        if decoding.size is not None:
            height, width = decoding.size
            drafted = image.draft(decoding.mode, (width, height))  # None: not a JPEG, decoded whole
            box = drafted[1] if drafted else None  # the original image's extent in drafted pixels
        if decoding.mode is not None and image.mode != decoding.mode:
            image = image.convert(decoding.mode)
        if decoding.size is not None and (image.size, box or (0, 0, width, height)) != (
            (width, height),
            (0, 0, width, height),
        ):
            image = image.resize((width, height), Image.Resampling.BILINEAR, box=box)
        array = np.asarray(image)
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    if not (array.flags.writeable and array.flags.c_contiguous):  # torch warns on read-only arrays
        array = array.copy()
    return torch.from_numpy(array)
