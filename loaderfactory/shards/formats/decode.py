"""Decode a sample's fields by extension, as webdataset does.

``.npy`` → tensor, ``.pt``/``.pth`` → as saved (``weights_only=True``), ``.json`` → object,
``.txt`` → str, ``.cls``/``.idx`` → int, ``.jpg``/``.jpeg``/``.png``/``.webp`` → uint8 CHW tensor
(through Pillow, at a size and mode :class:`Decoding` may ask for: :mod:`.media`; without Pillow an
ImportError saying how to install it or keep bytes), anything else → bytes.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.formats.media import ImageDecoding, image_size, image_tensor
from loaderfactory.shards.formats.npy import npy_tensor

NATIVE = ImageDecoding()
"""Images decoded whole, in their stored mode."""


@dataclass(frozen=True)
class Decoding:
    """Which extensions decode (``extensions``: as ``decode`` says) and how images decode."""

    extensions: bool | Collection[str] = True
    image: ImageDecoding = NATIVE


Decode = bool | Collection[str] | Decoding
"""``True``: decode every known extension; ``False``: keep bytes; a collection: decode only those;
a :class:`Decoding`: one of those, with images at a size or mode."""
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")


def _npy(data: bytes | memoryview) -> torch.Tensor:
    tensor = npy_tensor(data)
    if tensor is None:  # an object array, an unknown version: np.load decides (and refuses pickles)
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    return tensor


def _pt(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)


def _int(data: bytes | memoryview) -> int:
    """``.cls``/``.idx``: ASCII digits, surrounding whitespace allowed."""
    raw = bytes(data)
    try:
        return int(raw)
    except ValueError:  # the error the text's own rules give (a non-ASCII byte, say)
        return int(raw.decode("ascii").strip())


DECODERS: dict[str, Callable[[Any], Any]] = {
    "npy": _npy,
    "pt": _pt,
    "pth": _pt,
    "json": json.loads,
    "txt": lambda data: data.decode("utf-8"),
    "cls": _int,
    "idx": _int,
    **dict.fromkeys(IMAGE_EXTENSIONS, image_tensor),
}


def decoding(decode: Decode, size: int | Sequence[int] | None = None, mode: str | None = None) -> Decode:
    """``decode`` with images decoded at ``size`` (``224`` or ``[h, w]``) and in ``mode`` (RGB, L,
    RGBA); ``decode`` itself when neither is given. ValueError for a bad size or mode."""
    if size is None and mode is None:
        return decode
    extensions = decode.extensions if isinstance(decode, Decoding) else decode
    if not isinstance(extensions, bool):
        extensions = frozenset(extensions)
    return Decoding(extensions, ImageDecoding(image_size(size), mode))


def extension(field: str) -> str:
    """The part of a field name that picks its decoder: after the last dot, lower case."""
    return field.rsplit(".", 1)[-1].lower()


def _as_bytes(decoder: Callable[[bytes], Any]) -> Callable[[bytes | memoryview], Any]:
    return lambda data: decoder(bytes(data))


def field_decoder(field: str, decode: Decode = True) -> Callable[[bytes | memoryview], Any]:
    """What turns the data of ``field`` into its value: its extension's decoder when ``decode`` asks
    for it, else ``bytes``. A ``.npy`` field decodes from a memoryview without a copy (its tensor
    shares a writable buffer; a read-only one is copied); every other decoder gets ``bytes``."""
    extensions, image = (
        (decode.extensions, decode.image) if isinstance(decode, Decoding) else (decode, NATIVE)
    )
    ext = extension(field)
    wanted = extensions if isinstance(extensions, bool) else ext in extensions
    decoder = DECODERS.get(ext)
    if not wanted or decoder is None:
        return bytes
    if decoder is image_tensor:
        return functools.partial(image_tensor, decoding=image)
    return decoder if decoder in (_npy, _int) else _as_bytes(decoder)


def decodes_npy(field: str, decode: Decode = True) -> bool:
    """Whether ``field`` decodes as ``.npy`` to a tensor under ``decode``."""
    return field_decoder(field, decode) is _npy


def decode_field(field: str, data: bytes | memoryview, decode: Decode = True) -> Any:
    """``data`` decoded by the extension of ``field`` when ``decode`` asks for it, else the bytes."""
    return field_decoder(field, decode)(data)


def decode_error(field: str, err: Exception, where: str) -> ShardError:
    """The error for a field that failed to decode, naming ``where`` (URL and sample)."""
    return ShardError(
        f"{where}, field {field!r}: cannot decode ({type(err).__name__}: {err}); "
        f"pass decode=False or leave {extension(field)!r} out of decode"
    )


def decode_in_sample(field: str, data: bytes | memoryview, decode: Decode, where: str) -> Any:
    """:func:`decode_field`, with a failure raised as ShardError naming ``where`` (URL and sample)."""
    try:
        return decode_field(field, data, decode)
    except Exception as err:
        raise decode_error(field, err, where) from err
