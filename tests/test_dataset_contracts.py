"""Contracts every registered dataset kind keeps, checked automatically for each one.

A new dataset kind joins these tests by adding one entry to ``SETUPS``: a function that prepares
what the kind needs (files, say) in a temporary folder and returns the overrides that select it.
A kind that reads several formats adds an entry per format, named ``<kind>_<format>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory import Loader, available, build_loader, compose

LENGTH = 10


def _synthetic(tmp: Path) -> list[str]:
    return ["dataset=synthetic", f"dataset.length={LENGTH}", "dataset.fields.image.shape=[2]"]


def _tensor_folder(tmp: Path) -> list[str]:
    for index in range(LENGTH):
        item = {"image": torch.full((2,), float(index)), "label": torch.tensor(index % 3), "index": index}
        torch.save(item, tmp / f"item_{index:03d}.pt")
    return ["dataset=tensor_folder", f"dataset.root={tmp}"]


def _tensor_folder_npy(tmp: Path) -> list[str]:
    for index in range(LENGTH):
        np.save(tmp / f"item_{index:03d}.npy", np.array(index))  # the item {"index": tensor(index)}
    return [
        "dataset=tensor_folder",
        f"dataset.root={tmp}",
        "dataset.pattern=*.npy",
        "dataset.array_key=index",
    ]


SETUPS: dict[str, Callable[[Path], list[str]]] = {
    "synthetic": _synthetic,
    "tensor_folder": _tensor_folder,
    "tensor_folder_npy": _tensor_folder_npy,
}
"""Per dataset kind (or format of one): prepares ``tmp`` and returns the overrides that build a dataset
of LENGTH items."""

KINDS = [kind for kind in available("dataset") if not kind.startswith("_")]  # `_target_` is not a kind


def build(kind: str, tmp: Path, *extra: str) -> Loader:
    return build_loader(compose([*SETUPS[kind](tmp), "loader=torch", "~prefetch", *extra]))


def tensors(item: Any) -> list[torch.Tensor]:
    """Every tensor of an item or batch, in key order."""
    if isinstance(item, dict):
        return [t for key in sorted(item) for t in tensors(item[key])]
    return [torch.as_tensor(item)]


def test_every_registered_dataset_kind_has_a_setup() -> None:
    """Registering a dataset kind without a SETUPS entry fails here, so no kind escapes the contracts."""
    assert set(KINDS) <= set(SETUPS), f"add SETUPS entries for {sorted(set(KINDS) - set(SETUPS))}"


@pytest.mark.parametrize("kind", list(SETUPS))
def test_len_is_what_indexing_reaches_and_items_are_reproducible(kind: str, tmp_path: Path) -> None:
    """``len(dataset)`` items, each loadable by index, equal between two builds of the same config."""
    with build(kind, tmp_path) as first, build(kind, tmp_path) as second:
        a, b = first.dataset, second.dataset
        assert len(a) == LENGTH
        for index in range(LENGTH):
            left, right = tensors(a[index]), tensors(b[index])
            assert len(left) == len(right) > 0
            assert all(torch.equal(x, y) for x, y in zip(left, right, strict=True))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", list(SETUPS))
def test_an_epoch_batches_every_item_once(kind: str, num_workers: int, tmp_path: Path) -> None:
    """Behind the torch loader (with or without worker processes) an epoch covers each item once."""
    extra = ["loader.batch_size=3", f"loader.num_workers={num_workers}"]
    with build(kind, tmp_path, *extra) as loader:
        batches = list(loader)
    assert len(batches) == math.ceil(LENGTH / 3) == len(loader)
    assert sorted(int(i) for batch in batches for i in batch["index"]) == list(range(LENGTH))
