"""``tensor_folder`` reads each file by its extension: .pt/.pth dict items, .npy arrays, .npz archives."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory import build_loader, validate
from loaderfactory.components.data.datasets import TensorFolderDataset
from loaderfactory.errors import ConfigError

FORMATS = [".pt", ".pth", ".npy", ".npz"]
READS = r"tensor_folder reads \.pt/\.pth \(a dict item\), \.npy \(one array\) and \.npz \(named arrays\)"


def write(path: Path, index: int) -> dict[str, torch.Tensor]:
    """Writes item ``index`` in the format ``path``'s extension names; returns the item it should read as."""
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + index
    if path.suffix == ".npy":
        np.save(path, x.numpy())
        return {"data": x}
    item = {"x": x, "id": torch.tensor(index)}
    if path.suffix == ".npz":
        np.savez(path, **{key: value.numpy() for key, value in item.items()})
    else:
        torch.save(item, path)
    return item


def same_items(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        isinstance(a[k], torch.Tensor) and a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a
    )


def config(root: Path, pattern: str, **dataset: Any) -> dict[str, Any]:
    return {
        "dataset": {"kind": "tensor_folder", "root": str(root), "pattern": pattern, **dataset},
        "loader": {"kind": "torch", "batch_size": 2},
    }


@pytest.mark.parametrize("suffix", FORMATS)
def test_each_format_round_trips_through_the_dataset(suffix: str, tmp_path: Path) -> None:
    """Every file of a supported format reads back as the item written, values and dtypes alike."""
    expected = [write(tmp_path / f"item{i}{suffix}", i) for i in range(3)]
    dataset = TensorFolderDataset(tmp_path, pattern=f"*{suffix}")
    assert len(dataset) == 3
    assert all(same_items(dataset[i], expected[i]) for i in range(3))


@pytest.mark.parametrize("suffix", FORMATS)
def test_each_format_round_trips_through_build_loader(suffix: str, tmp_path: Path) -> None:
    """A ``tensor_folder`` config with a format's pattern batches its files' items in sorted order."""
    expected = [write(tmp_path / f"item{i}{suffix}", i) for i in range(4)]
    with build_loader(config(tmp_path, f"*{suffix}")) as loader:
        batches = list(loader)
    assert len(batches) == 2
    for batch, pair in zip(batches, [expected[:2], expected[2:]], strict=True):
        assert same_items(batch, {k: torch.stack([item[k] for item in pair]) for k in pair[0]})


def test_npy_item_is_a_writable_copy_under_array_key(tmp_path: Path) -> None:
    """A .npy array lands under ``array_key`` as a tensor the caller may change without touching the file."""
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.int16))
    dataset = TensorFolderDataset(tmp_path, pattern="*.npy", array_key="image")
    item = dataset[0]
    assert set(item) == {"image"} and isinstance(item["image"], torch.Tensor)
    item["image"] += 10
    assert dataset[0]["image"].tolist() == [0, 1, 2, 3]
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2, 3]


def test_npy_of_any_layout_or_byte_order_reads_as_its_values(tmp_path: Path) -> None:
    """Big-endian, Fortran-ordered and zero-dimensional arrays read back as the same values."""
    values = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.save(tmp_path / "a_big.npy", values.astype(">f8"))
    np.save(tmp_path / "b_fortran.npy", np.asfortranarray(values))
    np.save(tmp_path / "c_scalar.npy", np.array(7))
    dataset = TensorFolderDataset(tmp_path, pattern="*.npy")
    assert torch.equal(dataset[0]["data"], torch.from_numpy(values))
    assert torch.equal(dataset[1]["data"], torch.from_numpy(values))
    assert dataset[2]["data"].shape == () and int(dataset[2]["data"]) == 7


def test_array_key_from_config(tmp_path: Path) -> None:
    """``array_key`` in the config names the key of .npy items."""
    np.save(tmp_path / "a.npy", np.zeros(3, dtype=np.float32))
    with build_loader(config(tmp_path, "*.npy", array_key="volume")) as loader:
        (batch,) = list(loader)
    assert set(batch) == {"volume"} and batch["volume"].shape == (1, 3)


def test_a_mixed_folder_reads_each_file_by_its_extension(tmp_path: Path) -> None:
    """With ``pattern: "*"`` a folder of all four formats is one dataset, each file read its own way."""
    values = [torch.full((2,), float(i)) for i in range(4)]
    torch.save({"data": values[0]}, tmp_path / "a.pt")
    torch.save({"data": values[1]}, tmp_path / "b.pth")
    np.save(tmp_path / "c.npy", values[2].numpy())
    np.savez(tmp_path / "d.npz", data=values[3].numpy())
    dataset = TensorFolderDataset(tmp_path, pattern="*")
    assert [dataset[i]["data"].tolist() for i in range(4)] == [v.tolist() for v in values]
    with build_loader(config(tmp_path, "*")) as loader:
        batches = list(loader)
    assert [b["data"].tolist() for b in batches] == [[[0.0, 0.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]]]


@pytest.mark.parametrize(
    ("pattern", "suffix"), [("*.txt", ".txt"), ("*.pkl", ".pkl"), ("sub/item.CSV", ".CSV")]
)
def test_validation_refuses_a_pattern_of_another_extension(tmp_path: Path, pattern: str, suffix: str) -> None:
    """A pattern that can only select unreadable files is refused at ``dataset.pattern``, before any I/O."""
    message = rf"^dataset\.pattern: {READS}; {re.escape(repr(pattern))} selects {re.escape(suffix)} files$"
    with pytest.raises(ConfigError, match=message) as info:
        validate(config(tmp_path / "missing", pattern))
    assert info.value.paths == ["dataset.pattern"]


@pytest.mark.parametrize(
    "pattern", ["*", "*.np?", "*.np[yz]", "**/*", "sub/*", "*.pt", "*.PTH", "item_*.npz"]
)
def test_validation_passes_readable_and_glob_extensions(tmp_path: Path, pattern: str) -> None:
    """Readable extensions, and extensions left to a glob, pass validation; the files decide at build."""
    validate(config(tmp_path, pattern))


def test_an_unsupported_file_matched_by_a_glob_is_refused_at_build(tmp_path: Path) -> None:
    """A glob that also matches a .txt file is a ConfigError at ``dataset.pattern`` naming that file."""
    write(tmp_path / "a.npy", 0)
    (tmp_path / "notes.txt").write_text("not an array")
    with pytest.raises(
        ConfigError, match=rf"^dataset\.pattern: {READS}; '\*' also matches 'notes\.txt' in .*'\*\.npy'"
    ) as info:
        build_loader(config(tmp_path, "*"))
    assert info.value.paths == ["dataset.pattern"]


def test_the_runtime_refusal_names_a_few_files(tmp_path: Path) -> None:
    """Constructed from Python, the dataset raises ValueError naming three unsupported files and a count."""
    write(tmp_path / "a.pt", 0)
    for name in ["b.csv", "c.json", "d.pkl", "e", "f.txt"]:
        (tmp_path / name).write_text("")
    with pytest.raises(ValueError, match=r"also matches 'b\.csv', 'c\.json', 'd\.pkl' and 2 more in "):
        TensorFolderDataset(tmp_path, pattern="*")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.npy", b"not an array", "pickled"),
        ("short.npy", b"\x93NUMPY\x01\x00v\x00", "EOF"),
        ("bad.npz", b"PK\x03\x04 not a zip", "not a zip file"),
        ("bad.pt", b"not a tensor", r"weights_only=True\) refused it"),
    ],
)
def test_a_corrupt_file_names_the_file(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    """A file whose bytes are not its extension's format is a ValueError naming the file and the cause."""
    (tmp_path / name).write_bytes(content)
    dataset = TensorFolderDataset(tmp_path, pattern="*")
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(tmp_path / name))}: cannot read it as a \.\w+ file: .*{match}"
    ):
        dataset[0]


def test_a_corrupt_npy_names_the_file_through_the_loader(tmp_path: Path) -> None:
    """Read by a built loader, a corrupt .npy still names its file."""
    write(tmp_path / "a.npy", 0)
    (tmp_path / "b.npy").write_bytes(b"\x93NUMPY garbage")
    with build_loader(config(tmp_path, "*.npy")) as loader, pytest.raises(ValueError, match=r"b\.npy: "):
        list(loader)


def test_an_npz_archive_named_npy_says_to_rename_it(tmp_path: Path) -> None:
    """An .npz archive saved under a .npy name is refused with the fix."""
    np.savez(tmp_path / "a.npz", x=np.zeros(2))
    (tmp_path / "a.npz").rename(tmp_path / "a.npy")
    with pytest.raises(
        ValueError, match=r"a\.npy: .*holds an \.npz archive, not one array; rename it to \.npz"
    ):
        TensorFolderDataset(tmp_path, pattern="*.npy")[0]


def test_an_array_torch_cannot_hold_names_the_file(tmp_path: Path) -> None:
    """A .npy of strings is refused naming the file, not with a bare conversion error."""
    np.save(tmp_path / "words.npy", np.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"words\.npy: cannot read it as a \.npy file: can't convert"):
        TensorFolderDataset(tmp_path, pattern="*.npy")[0]


def test_npy_folder_through_compose_and_the_cli_validation(tmp_path: Path) -> None:
    """The Hydra path: ``dataset=tensor_folder`` with a .npy pattern builds; a .txt pattern is refused."""
    from loaderfactory import compose

    for i in range(3):
        write(tmp_path / f"item{i}.npy", i)
    cfg = compose(
        ["dataset=tensor_folder", f"dataset.root={tmp_path}", "dataset.pattern=*.npy", "loader.batch_size=3"]
    )
    with build_loader(cfg) as loader:
        (batch,) = list(loader)
    assert batch["data"].shape == (3, 2, 3)
    with pytest.raises(ConfigError, match=READS) as info:
        validate(compose(["dataset=tensor_folder", f"dataset.root={tmp_path}", "dataset.pattern=*.txt"]))
    assert info.value.paths == ["dataset.pattern"]
