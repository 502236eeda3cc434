"""Contracts every registered dataset kind keeps, checked automatically for each one.

A dataset kind joins these tests through its registration: ``register("dataset", ..., contract=...)``
with the overrides that build ``CONTRACT_LENGTH`` items, or a function that first writes the files it
reads into a temporary folder. A kind that reads several formats gives a contract per format, each
with its own ``name``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from loaderfactory import Loader, build_loader, compose
from loaderfactory.config.registry import CONTRACT_LENGTH
from loaderfactory.hydra.cli import run_app
from tests.test_contracts import Case, cases, missing_contracts

CASES = cases(["dataset"])


def build(case: Case, tmp: Path, *extra: str) -> Loader:
    return build_loader(compose([*case.contract.overrides(tmp), "loader=torch", "~prefetch", *extra]))


def tensors(item: Any) -> list[torch.Tensor]:
    """Every tensor of an item or batch, in key order; a string or bytes value (a shard sample's
    ``__key__``, a field kept undecoded) as a tensor of its bytes."""
    if isinstance(item, dict):
        return [t for key in sorted(item) for t in tensors(item[key])]
    if isinstance(item, str | bytes):
        data = item.encode() if isinstance(item, str) else item
        return [torch.tensor(list(data), dtype=torch.uint8)]
    return [torch.as_tensor(item)]


def test_every_registered_dataset_kind_declares_a_contract() -> None:
    """A dataset kind registered without a contract fails here, so no kind escapes the contracts."""
    missing = missing_contracts(("dataset",))
    assert not missing, (
        f"{', '.join(missing)}: pass contract=[overrides building {CONTRACT_LENGTH} items] (or a function "
        "writing its files into a folder and returning them) to its register(...) call; see CONTRIBUTING.md"
    )


@pytest.mark.parametrize("case", CASES, ids=str)
def test_len_is_what_indexing_reaches_and_items_are_reproducible(case: Case, tmp_path: Path) -> None:
    """``len(dataset)`` items, each loadable by index, equal between two builds of the same config."""
    with build(case, tmp_path) as first, build(case, tmp_path) as second:
        a, b = first.dataset, second.dataset
        assert len(a) == CONTRACT_LENGTH
        for index in range(CONTRACT_LENGTH):
            left, right = tensors(a[index]), tensors(b[index])
            assert len(left) == len(right) > 0
            assert all(torch.equal(x, y) for x, y in zip(left, right, strict=True))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_an_epoch_batches_every_item_once(case: Case, num_workers: int, tmp_path: Path) -> None:
    """Behind the torch loader (with or without worker processes) an epoch covers each item once."""
    extra = ["loader.batch_size=3", f"loader.num_workers={num_workers}"]
    with build(case, tmp_path, *extra) as loader:
        batches = list(loader)
    assert len(batches) == math.ceil(CONTRACT_LENGTH / 3) == len(loader)
    assert sorted(int(i) for batch in batches for i in batch["index"]) == list(range(CONTRACT_LENGTH))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_validate_mode_names_the_kind(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command's ``run.mode=validate`` accepts the contract's config and names the dataset kind."""
    run_app(compose([*case.contract.overrides(tmp_path), "run.mode=validate"]))
    assert capsys.readouterr().out.startswith(f"config OK: dataset={case.kind},")
