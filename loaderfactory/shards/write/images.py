"""Image fields for ``pack``: bytes marked as an image format are checked and kept as they are; PIL
images are stored as compressed image files.

A PIL image is stored, in this order of preference:

1. as the file it was opened from (``Image.open(path)`` or from ``BytesIO``), byte for byte, when
   that file is a jpg, png or webp whose pixels the image still holds: not decoded yet (nothing can
   have changed them), or decoded and equal to the file's. Asked for another format (or a
   ``quality``) it is encoded instead.
2. encoded as ``encode`` asks (``{"image": "jpg"}``, ``{"image": {"format": "webp", "quality": 80}}``;
   jpg and webp at quality 95 unless given);
3. encoded in its own format when it has one of jpg, png, webp (``image.format``), else as PNG, which
   is lossless: what is read back is the image's pixels exactly.

Pillow is needed only when a value is a PIL image, which cannot exist without it.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaderfactory.shards.errors import PackError

PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP"}
"""Extension → Pillow's format name."""
OWN_EXTENSIONS = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp"}
"""A PIL image's own format (``image.format``) → the extension it is stored under (Pillow opens
many cameras' JPEGs as MPO: a JPEG followed by more images, its first one decoded)."""
DEFAULT_QUALITY = 95
"""Quality of jpg and webp when not given (Pillow's own 75 is visibly lossy)."""


@dataclass(frozen=True)
class ImageEncoding:
    """How one field is stored: under extension ``format``; a PIL image at ``quality`` (jpg, webp)."""

    format: str
    quality: int | None = None


def image_field(value: Any, encoding: ImageEncoding | None, where: str) -> tuple[str, bytes] | None:
    """``(extension, bytes)`` for a PIL image or a value that ``encoding`` marks; None for any other
    value (the packer stores it by its type). PackError naming ``where`` for a marked value that is
    neither bytes nor a PIL image, or one that cannot be stored as marked."""
    if is_pil_image(value):
        return image_file(value, encoding, where)
    if encoding is None:
        return None
    if isinstance(value, bytes | bytearray):
        return marked_bytes(bytes(value), encoding, where)
    raise PackError(
        f"{where}: encode marks it {encoding.format}, but it is a {type(value).__name__}; give the "
        "image file's bytes or a PIL image, or drop the field from encode"
    )


def is_pil_image(value: Any) -> bool:
    """Whether ``value`` is a PIL image (without importing Pillow: no image exists unless it was)."""
    module = sys.modules.get("PIL.Image")
    return module is not None and isinstance(value, module.Image)


def is_format(data: bytes, extension: str) -> bool:
    """Whether ``data`` begins as a file of ``extension`` does (its magic bytes)."""
    if extension in ("jpg", "jpeg"):
        return data[:3] == b"\xff\xd8\xff"
    if extension == "png":
        return data[:8] == b"\x89PNG\r\n\x1a\n"
    if extension == "webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    return False


def marked_bytes(data: bytes, encoding: ImageEncoding, where: str) -> tuple[str, bytes]:
    """``(extension, data)`` for bytes that ``encode`` marks as an image format, checked to be one."""
    if encoding.quality is not None:
        raise PackError(
            f"{where}: encode gives quality {encoding.quality}, but bytes are stored as they are, "
            "never re-encoded; drop quality, or give a PIL image"
        )
    if not is_format(data, encoding.format):
        found = next((ext for ext in ("jpg", "png", "webp") if is_format(data, ext)), None)
        hint = f"they are a {found} file: mark the field {found}" if found else "give the file's bytes"
        raise PackError(
            f"{where}: encode marks it {encoding.format}, but its bytes are not a {encoding.format} file "
            f"(they begin {bytes(data[:12])!r}); {hint}"
        )
    return encoding.format, bytes(data)


def image_file(image: Any, encoding: ImageEncoding | None, where: str) -> tuple[str, bytes]:
    """``(extension, bytes of an image file)`` for a PIL image, as the module docstring says."""
    own = OWN_EXTENSIONS.get(image.format or "")
    asked = PIL_FORMATS[encoding.format] if encoding else None
    if own and (encoding is None or (asked == PIL_FORMATS[own] and not encoding.quality)):
        original = _original_file(image)
        if original is not None:
            return (encoding.format if encoding else own), original
    if encoding is None:
        encoding = ImageEncoding(own or "png")
    return encoding.format, _encoded(image, encoding, where)


def _encoded(image: Any, encoding: ImageEncoding, where: str) -> bytes:
    name = PIL_FORMATS[encoding.format]
    options = {} if name == "PNG" else {"quality": encoding.quality or DEFAULT_QUALITY}
    out = io.BytesIO()
    try:
        image.save(out, format=name, **options)
    except (OSError, ValueError, KeyError) as err:  # a mode the format lacks: RGBA or P as jpg, I;16 as webp
        raise PackError(
            f"{where}: cannot encode a {image.mode} image as {encoding.format} ({err}); convert it in the "
            "dataset (image.convert('RGB')) or store it as png"
        ) from err
    return out.getvalue()


def _original_file(image: Any) -> bytes | None:
    """The bytes of the file the image was opened from, when they still give its pixels; else None."""
    filename = getattr(image, "filename", "")
    fp = getattr(image, "fp", None)
    try:
        data = (
            Path(filename).read_bytes() if filename else fp.getvalue() if isinstance(fp, io.BytesIO) else None
        )
    except OSError:
        return None
    if data is None:
        return None
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as stored:
            if (stored.format, stored.size, stored.mode) != (image.format, image.size, image.mode):
                return None  # the file changed since, or the image was drafted to another size or mode
            # ImageFile.tile lists what is still to decode: undecoded pixels are the file's
            if getattr(image, "tile", None) or np.array_equal(np.asarray(stored), np.asarray(image)):
                return data
    except (OSError, ValueError):
        return None
    return None
