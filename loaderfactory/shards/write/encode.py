"""Turn one item of a dataset into shard fields: a name with an extension, and the encoded bytes.

The extension is the one the shards reader (:mod:`loaderfactory.shards.formats.decode`) decodes back to an
equal value, so an item packed and read back through ``ShardsDataset`` has the same values under
``<key>.<extension>``:

=====================================================  ===========  ======================================
value                                                  field        read back as
=====================================================  ===========  ======================================
``torch.Tensor`` of a dtype numpy has                  ``key.npy``  the tensor (same dtype and shape)
other tensors (bfloat16, sparse, subclasses, grad)     ``key.pt``   the tensor, as saved
numpy array or numpy scalar                            ``key.npy``  a tensor of the same dtype and shape
                                                                    (the reader decodes ``.npy`` to tensors)
``int``                                                ``key.cls``  the int
``str``                                                ``key.txt``  the str
``bytes``, ``bytearray``                               ``key.bin``  bytes
bytes that ``encode`` marks (``{"key": "jpg"}``, png,  ``key.jpg``  a uint8 CHW tensor (Pillow); the bytes
webp), checked to be that format                                    with ``decode=False``
a PIL image (:mod:`.images`)                      ``key.png``  a uint8 CHW tensor of its pixels (or
                                                                    ``.jpg``/``.webp``: its own format,
                                                                    or the one ``encode`` asks)
``bool``, ``float``, ``None``, lists and dicts of      ``key.json`` the equal value
those with string keys
tuples, and lists or dicts holding tensors or bytes    ``key.pt``   as saved (``torch.load`` weights-only)
=====================================================  ===========  ======================================

A dict item gives one field per key; a tuple or list item the fields ``0``, ``1``, ...; any other
item the one field ``item``. Nested dicts are kept whole in one field (``.json`` or ``.pt``), never
flattened. Anything else (an object, a set) raises :class:`PackError` naming the item, the field
and where the value lies inside it (``meta.tags``).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from loaderfactory.shards.errors import PackError as PackError  # importable from here, as before
from loaderfactory.shards.write.images import ImageEncoding, image_field

Fields = dict[str, bytes]
"""A sample's fields: ``"image.pt"`` → the bytes of the tar member (or Parquet cell)."""


def item_fields(item: Any, index: int, encode: Mapping[str, ImageEncoding] | None = None) -> Fields:
    """The fields of ``item`` (number ``index`` of the dataset), each encoded by its value's type, or
    as ``encode`` asks for the image fields it names (field → :class:`ImageEncoding`)."""
    if isinstance(item, Mapping):
        named = list(item.items())
    elif isinstance(item, tuple | list):
        named = [(str(number), value) for number, value in enumerate(item)]
    else:
        named = [("item", item)]
    encode = encode or {}
    fields: Fields = {}
    for key, value in named:
        _check_key(key, index)
        extension, data = encode_value(value, index, key, encode.get(key))
        fields[f"{key}.{extension}"] = data
    _check_encoded_fields_exist(encode, [key for key, _ in named], index)
    return fields


def _check_encoded_fields_exist(encode: Mapping[str, ImageEncoding], keys: list[Any], index: int) -> None:
    missing = sorted(set(encode) - set(keys))
    if missing:
        raise PackError(
            f"item {index}: encode names the field(s) {missing}, which the item lacks (its fields: "
            f"{[str(key) for key in keys]}); name fields the items have"
        )


def _check_key(key: Any, index: int) -> None:
    if not isinstance(key, str):
        raise PackError(f"item {index}: key {key!r} is a {type(key).__name__}; name the item's fields by str")
    if not key or "/" in key or key.startswith("__") or key != key.strip():
        raise PackError(
            f"item {index}, field {key!r}: a field name must be non-empty, without '/', surrounding "
            "spaces or a leading '__' (the reader's __key__ and __url__); rename it"
        )


def encode_value(
    value: Any, index: int, key: str, encoding: ImageEncoding | None = None
) -> tuple[str, bytes]:
    """``(extension, bytes)`` for one value; PackError naming the item and field when none fits.

    ``encoding`` marks the field as an image (:mod:`~loaderfactory.shards.write.images`): bytes are
    kept as they are once checked to be that format, a PIL image is encoded so; a PIL image is
    stored as an image file without it too.
    """
    image = image_field(value, encoding, f"item {index}, field {key!r}")
    if image is not None:
        return image
    if isinstance(value, torch.Tensor):
        array = _plain_array(value)
        if array is not None:  # .npy: a tenth of torch.save's size for small tensors, faster to read
            return "npy", _npy_bytes(array, index, key)
        return "pt", _torch_bytes(_compact(value))
    if isinstance(value, np.ndarray | np.generic):
        return "npy", _npy_bytes(np.asarray(value), index, key)
    if isinstance(value, bytes | bytearray):
        return "bin", bytes(value)
    if isinstance(value, str):
        return "txt", value.encode("utf-8")
    if isinstance(value, int) and not isinstance(value, bool):
        return "cls", str(value).encode("ascii")
    if _json_exact(value):
        return "json", json.dumps(value, allow_nan=True).encode("utf-8")
    if _weights_only(value):
        return "pt", _torch_bytes(value)
    path, bad = _unstorable(value, key) or (key, value)
    raise PackError(
        f"item {index}, field {key!r}: {path}: cannot store a {type(bad).__name__} so it reads back "
        "equal; store tensors, numpy arrays, numbers, str, bytes, or lists/tuples/dicts of them "
        "(numpy arrays inside a list or dict: make them tensors), or convert it in the dataset"
    )


def _unstorable(value: Any, path: str) -> tuple[str, Any] | None:
    """Where in ``value`` (reached by ``path``: ``meta.tags[2]``) the first part lies that
    ``torch.load(weights_only=True)`` cannot give back, and that part; None when there is none."""
    if type(value) in (list, tuple):
        parts = ((f"{path}[{number}]", item) for number, item in enumerate(value))
    elif type(value) is dict:
        for name in value:
            if not _weights_only(name):
                return f"{path} (the key {name!r})", name
        parts = (
            (f"{path}.{name}" if isinstance(name, str) else f"{path}[{name!r}]", item)
            for name, item in value.items()
        )
    else:
        return None if _weights_only(value) else (path, value)
    return next((found for inner, item in parts if (found := _unstorable(item, inner))), None)


def _plain_array(tensor: torch.Tensor) -> np.ndarray[Any, Any] | None:
    """The tensor's values as a numpy array, when ``.npy`` gives back an equal tensor: a plain dense
    tensor, not needing grad, of a dtype numpy has (not bfloat16)."""
    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.requires_grad:
        return None
    try:
        return tensor.detach().cpu().resolve_conj().resolve_neg().numpy()
    except (TypeError, RuntimeError):
        return None


def _compact(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor alone: ``torch.save`` of a view would write its whole storage (a row of a matrix:
    the matrix)."""
    tensor = tensor.cpu()  # a CUDA tensor would load only where CUDA is
    if tensor.layout == torch.strided and (
        tensor.untyped_storage().nbytes() > tensor.nelement() * tensor.element_size()
    ):
        return tensor.detach().clone().requires_grad_(tensor.requires_grad)
    return tensor


def _torch_bytes(value: Any) -> bytes:
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def _npy_bytes(array: np.ndarray[Any, Any], index: int, key: str) -> bytes:
    try:  # the reader turns .npy into tensors: refuse what torch has no dtype for, now
        torch.from_numpy(np.empty(0, dtype=array.dtype))
        out = io.BytesIO()
        np.save(out, array, allow_pickle=False)
    except (TypeError, ValueError) as err:
        raise PackError(
            f"item {index}, field {key!r}: a numpy array of dtype {array.dtype} cannot be stored as .npy "
            f"and read back as a tensor ({err}); convert it (to a list, str or a numeric dtype)"
        ) from err
    return out.getvalue()


def _json_exact(value: Any) -> bool:
    """Whether JSON gives ``value`` back equal and of the same types (no tuples, no int dict keys)."""
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return not math.isnan(value)  # NaN reads back, but never equal to itself
    if type(value) is list:
        return all(_json_exact(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def _weights_only(value: Any) -> bool:
    """Whether ``torch.load(weights_only=True)`` reads ``value`` back: tensors, plain scalars and
    builtin containers of them."""
    if value is None or isinstance(value, bool | int | float | str | bytes | torch.Tensor):
        return True
    if type(value) in (list, tuple):
        return all(_weights_only(v) for v in value)
    if type(value) is dict:
        return all(_weights_only(k) and _weights_only(v) for k, v in value.items())
    return False
