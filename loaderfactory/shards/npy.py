"""``.npy`` bytes to an array without ``np.load``'s per-call header parsing and copy.

A shard's ``.npy`` fields mostly share a few headers (same dtype and shape), so a parsed header is
kept by its bytes; the array is then a view of the data (``np.frombuffer``), copied only when the
buffer is read-only or misaligned, so ``torch.from_numpy`` gets a writable, aligned array.
"""

from __future__ import annotations

import io
import math

import numpy as np
from numpy.lib import format as npy_format

MAGIC = b"\x93NUMPY"
_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}
_MAX_HEADERS = 256


def npy_array(data: bytes | memoryview) -> np.ndarray | None:
    """The array in ``data`` (an ``.npy`` file); None when ``np.load`` must read it (an object
    dtype, a format version this does not know). Raises ValueError on a cut-off or malformed file."""
    view = memoryview(data)
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
        parsed = _parse_header(header, (major, view[7]))
        if parsed is None:
            return None
        if len(_HEADERS) < _MAX_HEADERS:
            _HEADERS[header] = parsed
    dtype, shape, fortran = parsed
    array = np.frombuffer(view, dtype=dtype, count=math.prod(shape), offset=start)
    array = array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)
    if not (array.flags.writeable and array.flags.aligned):
        array = array.copy(order="K")
    return array


def _parse_header(header: bytes, version: tuple[int, int]) -> tuple[np.dtype, tuple[int, ...], bool] | None:
    """(dtype, shape, Fortran order) from numpy's own header reader; None for object dtypes."""
    stream = io.BytesIO(header)
    stream.seek(6 + 2)
    read_header = npy_format.read_array_header_1_0 if version[0] == 1 else npy_format.read_array_header_2_0
    shape, fortran, dtype = read_header(stream)
    if dtype.hasobject:
        return None
    return dtype, tuple(shape), bool(fortran)
