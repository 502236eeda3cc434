"""``.npy`` bytes to an array without ``np.load``'s per-call header parsing and copy.

A shard's ``.npy`` fields mostly share a few headers (same dtype and shape), so a parsed header is
kept by its bytes; the array is then a view of the data (``np.frombuffer``), copied only when the
buffer is read-only or misaligned, so ``torch.from_numpy`` gets a writable, aligned array.
"""

from __future__ import annotations

import io
import math

import numpy as np
import torch
from numpy.lib import format as npy_format

MAGIC = b"\x93NUMPY"
_HEADERS: dict[bytes, _Parsed] = {}
_MAX_HEADERS = 256
_last: tuple[bytes, _Parsed | None] = (MAGIC + b"\xff", None)
"""The header parsed last, and what it says (a header no file has, at first)."""


def npy_array(data: bytes | memoryview) -> np.ndarray | None:
    """The array in ``data`` (an ``.npy`` file); None when ``np.load`` must read it (an object
    dtype, a format version this does not know). Raises ValueError on a cut-off or malformed file."""
    view = memoryview(data)
    parsed = _header(view)
    if parsed is None:
        return None
    dtype, shape, fortran, start, _ = parsed
    array = np.frombuffer(view, dtype=dtype, count=math.prod(shape), offset=start)
    array = array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)
    if not (array.flags.writeable and array.flags.aligned):
        array = array.copy(order="K")
    return array


def npy_tensor(data: bytes | memoryview) -> torch.Tensor | None:
    """:func:`npy_array` as a tensor; a one-dimensional array in a writable buffer is viewed by
    torch directly (``torch.frombuffer``: a third of numpy's and ``from_numpy``'s cost)."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    parsed = _header(view)
    if parsed is None:
        return None
    dtype, shape, _, start, torch_dtype = parsed
    if torch_dtype is not None and not view.readonly and len(shape) == 1 and shape[0]:
        if start + shape[0] * dtype.itemsize > len(view):
            raise ValueError(f"the .npy data is cut off: {len(view) - start} bytes for shape {shape}")
        tensor = torch.frombuffer(view, dtype=torch_dtype, count=shape[0], offset=start)
        aligned = dtype.itemsize == 1 or tensor.data_ptr() % dtype.itemsize == 0
        return tensor if aligned else tensor.clone()
    array = npy_array(view)
    return None if array is None else torch.from_numpy(array)


def parsed_header(data: bytes | memoryview) -> _Parsed | None:
    """What the header of ``data`` (an ``.npy`` file) says; None for what ``np.load`` must read.
    Raises ValueError on a malformed header."""
    return _header(data if isinstance(data, memoryview) else memoryview(data))


_Parsed = tuple[np.dtype, tuple[int, ...], bool, int, "torch.dtype | None"]
"""(dtype, shape, Fortran order, offset of the data, the torch dtype where torch views it as is)."""


def _header(view: memoryview) -> _Parsed | None:
    """The parsed header of an ``.npy`` file, kept by its bytes; None for what np.load must read.
    The header seen last is tried first: one comparison where a field's arrays share a header."""
    global _last  # replaced in one assignment: safe across threads
    last_header, last_parsed = _last
    if bytes(view[: len(last_header)]) == last_header:  # quicker than comparing the memoryview
        return last_parsed
    parsed = _header_of(view)
    if parsed is not None:
        _last = (bytes(view[: parsed[3]]), parsed)
    return parsed


def _header_of(view: memoryview) -> _Parsed | None:
    if bytes(view[:6]) != MAGIC or len(view) < 10:
        return None
    major = view[6]
    width = {1: 2, 2: 4}.get(major)
    if width is None:
        return None
    start = 8 + width + int.from_bytes(view[8 : 8 + width], "little")
    header = bytes(view[:start])
    parsed = _HEADERS.get(header)
    if parsed is None:
        found = _parse_header(header, (major, view[7]))
        if found is None:
            return None
        dtype, shape, fortran = found
        parsed = (dtype, shape, fortran, start, _torch_dtype(dtype))
        if len(_HEADERS) < _MAX_HEADERS:
            _HEADERS[header] = parsed
    return parsed


def _torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype of ``dtype`` when torch reads its bytes as they are (native byte order)."""
    if not dtype.isnative:
        return None
    try:
        return torch.from_numpy(np.empty(0, dtype)).dtype
    except TypeError:
        return None


def _parse_header(header: bytes, version: tuple[int, int]) -> tuple[np.dtype, tuple[int, ...], bool] | None:
    """(dtype, shape, Fortran order) from numpy's own header reader; None for object dtypes."""
    stream = io.BytesIO(header)
    stream.seek(6 + 2)
    read_header = npy_format.read_array_header_1_0 if version[0] == 1 else npy_format.read_array_header_2_0
    shape, fortran, dtype = read_header(stream)
    if dtype.hasobject:
        return None
    return dtype, tuple(shape), bool(fortran)
