"""How many items a batch holds, whatever nesting the collate gave it."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory.components.data.batch_utils import batch_length


class Name(str):
    """A str subclass: takes the full check, and still counts as no items."""


CASES: list[tuple[str, Any, int]] = [
    ("tensor", torch.zeros(7, 3), 7),
    ("0-d tensor", torch.tensor(1.0), 1),
    ("array", np.zeros((5, 2)), 5),
    ("dict, keys first", {"__key__": [f"k{i}" for i in range(4)], "x": torch.zeros(9)}, 4),
    ("dict, tensor first", OrderedDict(x=torch.zeros(9), y=[1, 2]), 9),
    ("keys then a tensor", (["a", "b"], torch.zeros(6, 2)), 6),
    ("numbers then an array", [1, 2.0, None, True, b"x", np.zeros(3)], 3),
    ("subclassed strings then a dict", [Name("a"), {"x": torch.zeros(8)}], 8),
    ("strings only", ["a", "b", "c"], 3),
    ("empty dict", {}, 0),
    ("a number", 3, 1),
]


@pytest.mark.parametrize(("batch", "length"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_batch_length_is_the_first_tensor_or_array_else_the_length(batch: Any, length: int) -> None:
    assert batch_length(batch) == length
