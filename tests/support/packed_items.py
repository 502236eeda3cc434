"""What a packed item reads back as, and a check that two items are the same, types included."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def expected_item(value: Any) -> Any:
    """What the reader gives back for ``value``: numpy arrays and scalars as tensors (``.npy``), at
    any depth; the rest as it was."""
    if isinstance(value, np.ndarray | np.generic):
        return torch.from_numpy(np.asarray(value))
    if type(value) in (tuple, list):
        return type(value)(expected_item(v) for v in value)
    if type(value) is dict:
        return {key: expected_item(v) for key, v in value.items()}
    return value


def assert_same(got: Any, want: Any, where: str = "item") -> None:
    """Equal values of the same types (tensors: dtype and shape too), dict keys in the same order."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, f"{where}: {got!r} != {want!r}"
        assert torch.equal(got, want), f"{where}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for number, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{number}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"
