"""Built-in datasets: deterministic synthetic items, folders of .pt files, user classes by ``_target_``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

from loaderfactory import ConfigError, build_loader, register, validate
from loaderfactory.components.data.datasets import SyntheticDataset, TensorFolderDataset
from loaderfactory.config import registry
from loaderfactory.config.specs.base import Spec


def same_item(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


# --- synthetic --------------------------------------------------------------------------------------


def test_synthetic_default_items() -> None:
    """By default an item is a 3x32x32 float image, an int64 label below 10 and its index."""
    item = SyntheticDataset(4)[2]
    assert set(item) == {"image", "label", "index"}
    assert item["image"].shape == (3, 32, 32) and item["image"].dtype == torch.float32
    assert item["label"].shape == () and item["label"].dtype == torch.int64
    assert 0 <= int(item["label"]) < 10
    assert item["index"] == 2


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), index=st.integers(0, 49))
def test_synthetic_items_depend_only_on_seed_and_index(seed: int, index: int) -> None:
    """The same (seed, index) gives the same item, whatever was read before."""
    a, b = SyntheticDataset(50, seed=seed), SyntheticDataset(50, seed=seed)
    _ = [b[i] for i in range(3)]
    assert same_item(a[index], b[index])
    assert same_item(a[index], a[index - 50])


def test_synthetic_seeds_and_indices_differ() -> None:
    """Different seeds or indices give different data."""
    a, b = SyntheticDataset(10, seed=0), SyntheticDataset(10, seed=1)
    assert not torch.equal(a[3]["image"], b[3]["image"])
    assert not torch.equal(a[3]["image"], a[4]["image"])


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float64"]
)
def test_synthetic_fields_have_their_shape_and_dtype(dtype: str) -> None:
    """Every supported dtype is produced with the declared shape; integers stay below ``high``."""
    item = SyntheticDataset(2, {"v": {"shape": [4, 5], "dtype": dtype, "high": 3}})[1]
    assert item["v"].shape == (4, 5)
    assert item["v"].dtype == getattr(torch, dtype)
    if dtype not in ("bool",) and not item["v"].dtype.is_floating_point:
        assert int(item["v"].min()) >= 0 and int(item["v"].max()) < 3


def test_synthetic_index_out_of_range() -> None:
    """Indexing past the end raises IndexError (so iteration protocols stop)."""
    with pytest.raises(IndexError, match="index 5 out of range for a dataset of 5 items"):
        SyntheticDataset(5)[5]
    with pytest.raises(ValueError, match="length must be >= 1"):
        SyntheticDataset(0)


def test_synthetic_delay_stands_in_for_slow_storage() -> None:
    """``delay_ms`` makes each item take at least that long."""
    dataset = SyntheticDataset(3, delay_ms=20)
    start = time.perf_counter()
    dataset[0]
    assert time.perf_counter() - start >= 0.02


def test_synthetic_spec_builds_the_same_items() -> None:
    """The ``synthetic`` kind yields exactly what the class gives for the same arguments."""
    fields = {"x": {"shape": [2], "dtype": "float32", "high": 10}}
    config = {
        "dataset": {"kind": "synthetic", "length": 6, "seed": 7, "fields": fields},
        "loader": {"kind": "torch", "batch_size": 3},
    }
    with build_loader(config) as loader:
        batches = list(loader)
    direct = SyntheticDataset(6, fields, seed=7)
    assert torch.equal(batches[0]["x"], torch.stack([direct[i]["x"] for i in range(3)]))
    assert torch.equal(batches[1]["x"], torch.stack([direct[i]["x"] for i in range(3, 6)]))


# --- tensor_folder -------------------------------------------------------------------------------------


class AddSpec(Spec):
    """A test transform: adds ``amount`` to the tensors under ``keys``."""

    kind: Literal["add_for_test"] = "add_for_test"
    keys: list[str]
    amount: float = 1.0


def build_add(spec: AddSpec) -> Any:
    def add(item: dict[str, Any]) -> dict[str, Any]:
        return {k: v + spec.amount if k in spec.keys else v for k, v in item.items()}

    return add


@pytest.fixture
def add_transform() -> Iterator[str]:
    """Registers the ``add_for_test`` transform kind for one test."""
    register("transform", "add_for_test", AddSpec, build_add)
    yield "add_for_test"
    registry.unregister("transform", "add_for_test")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Files a0..a3.pt and b0.pt at the top, c0.pt in a subfolder, plus a note that is not a tensor file."""
    root = tmp_path / "items"
    (root / "sub").mkdir(parents=True)
    for i in range(4):
        torch.save({"x": torch.full((2,), float(i)), "id": torch.tensor(i)}, root / f"a{i}.pt")
    torch.save({"x": torch.full((2,), 10.0), "id": torch.tensor(10)}, root / "b0.pt")
    torch.save({"x": torch.full((2,), 20.0), "id": torch.tensor(20)}, root / "sub" / "c0.pt")
    (root / "notes.txt").write_text("not a tensor")
    return root


def test_tensor_folder_reads_sorted_pt_files(folder: Path) -> None:
    """All top-level ``.pt`` files are items, in sorted path order; other files are ignored."""
    dataset = TensorFolderDataset(folder)
    assert [int(dataset[i]["id"]) for i in range(len(dataset))] == [0, 1, 2, 3, 10]


def test_tensor_folder_glob_and_recursive(folder: Path) -> None:
    """``pattern`` filters files; ``recursive`` also searches subfolders."""
    assert len(TensorFolderDataset(folder, pattern="a*.pt")) == 4
    assert [int(item["id"]) for item in TensorFolderDataset(folder, pattern="[bc]*.pt", recursive=True)] == [
        10,
        20,
    ]


def test_tensor_folder_from_config_with_preprocess(folder: Path, add_transform: str) -> None:
    """A config with a glob and a registered preprocess transform yields transformed, filtered batches."""
    config = {
        "dataset": {
            "kind": "tensor_folder",
            "root": str(folder),
            "pattern": "a*.pt",
            "preprocess": {"kind": add_transform, "keys": ["x"], "amount": 100},
        },
        "loader": {"kind": "torch", "batch_size": 2},
    }
    with build_loader(config) as loader:
        batches = list(loader)
    assert len(batches) == 2
    assert batches[0]["x"].tolist() == [[100.0, 100.0], [101.0, 101.0]]
    assert batches[1]["id"].tolist() == [2, 3]


def test_tensor_folder_preprocess_is_validated(folder: Path, add_transform: str) -> None:
    """A transform's own fields are checked with the rest of the config, at their paths."""
    config = {
        "dataset": {"kind": "tensor_folder", "root": str(folder), "preprocess": {"kind": add_transform}}
    }
    with pytest.raises(ConfigError, match=r"dataset\.preprocess\.keys: required, but missing"):
        validate(config)


@pytest.mark.parametrize(
    ("root", "pattern", "match"),
    [("missing", "*.pt", "is not a folder"), ("items", "*.npz", r"no files match '\*\.npz'")],
)
def test_tensor_folder_problems_are_config_errors(folder: Path, root: str, pattern: str, match: str) -> None:
    """A missing folder, or one with no matching files, is a ConfigError at ``dataset.root``."""
    config = {"dataset": {"kind": "tensor_folder", "root": str(folder.parent / root), "pattern": pattern}}
    with pytest.raises(ConfigError, match=match) as info:
        build_loader(config)
    assert info.value.paths == ["dataset.root"]


def test_tensor_folder_file_without_a_dict(tmp_path: Path) -> None:
    """A file that holds a bare tensor is refused when read, naming the file."""
    torch.save(torch.zeros(2), tmp_path / "bare.pt")
    with pytest.raises(TypeError, match=r"bare\.pt: holds a Tensor; tensor_folder files must hold a dict"):
        TensorFolderDataset(tmp_path)[0]


# --- _target_ --------------------------------------------------------------------------------------------


class SquaresDataset(Dataset[dict[str, torch.Tensor]]):
    """A user dataset selected from YAML by ``_target_``."""

    def __init__(self, n: int, scale: float = 1.0) -> None:
        self.n, self.scale = n, scale

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"y": torch.tensor(index * index * self.scale)}


def test_target_dataset_is_built_with_its_arguments() -> None:
    """``_target_`` plus arguments builds the user's class, as Hydra users expect."""
    config = {
        "dataset": {"_target_": f"{__name__}.SquaresDataset", "n": 5, "scale": 2.0},
        "loader": {"kind": "torch", "batch_size": 5},
    }
    with build_loader(config) as loader:
        assert isinstance(loader.dataset, SquaresDataset)
        (batch,) = list(loader)
    assert batch["y"].tolist() == [0.0, 2.0, 8.0, 18.0, 32.0]


def test_target_dataset_with_wrong_arguments_is_a_config_error() -> None:
    """Arguments the class does not take are a ConfigError at ``dataset``, not a TypeError."""
    config = {"dataset": {"_target_": f"{__name__}.SquaresDataset", "m": 5}}
    with pytest.raises(
        ConfigError, match=r"^dataset: .*SquaresDataset\(m\): .*unexpected keyword argument 'm'"
    ):
        build_loader(config)
