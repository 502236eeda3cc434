"""Decode a sample's fields by extension, as webdataset does.

``.npy`` → tensor, ``.pt``/``.pth`` → as saved (``weights_only=True``), ``.json`` → object,
``.txt`` → str, ``.cls``/``.idx`` → int, ``.jpg``/``.jpeg``/``.png``/``.webp`` → uint8 CHW tensor
(through Pillow, when installed; else bytes), anything else → bytes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import torch

from loaderfactory.shards.errors import ShardError
from loaderfactory.shards.npy import npy_tensor

Decode = bool | Collection[str]
"""``True``: decode every known extension; ``False``: keep bytes; a collection: decode only those."""
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")


def _npy(data: bytes | memoryview) -> torch.Tensor:
    tensor = npy_tensor(data)
    if tensor is None:  # an object array, an unknown version: np.load decides (and refuses pickles)
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    return tensor


def _pt(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)


def _image(data: bytes) -> Any:
    try:
        from PIL import Image
    except ImportError:  # images stay bytes without Pillow, as documented
        return data
    with Image.open(io.BytesIO(data)) as image:
        array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


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
    **dict.fromkeys(IMAGE_EXTENSIONS, _image),
}


def extension(field: str) -> str:
    """The part of a field name that picks its decoder: after the last dot, lower case."""
    return field.rsplit(".", 1)[-1].lower()


def _as_bytes(decoder: Callable[[bytes], Any]) -> Callable[[bytes | memoryview], Any]:
    return lambda data: decoder(bytes(data))


def field_decoder(field: str, decode: Decode = True) -> Callable[[bytes | memoryview], Any]:
    """What turns the data of ``field`` into its value: its extension's decoder when ``decode`` asks
    for it, else ``bytes``. A ``.npy`` field decodes from a memoryview without a copy (its tensor
    shares a writable buffer; a read-only one is copied); every other decoder gets ``bytes``."""
    ext = extension(field)
    wanted = decode if isinstance(decode, bool) else ext in decode
    decoder = DECODERS.get(ext)
    if not wanted or decoder is None:
        return bytes
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
