"""Resuming after the data moved: a location that differs is reported, anything else is refused."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import loaderfactory
from loaderfactory.config.specs.locations import looks_like_location, names_location
from loaderfactory.errors import ResumeError, ResumeWarning

HERE = __name__
"""This module's import name, for ``_target_`` paths to the dataset below."""

LENGTH = 11
STOP = 2  # batches drawn before saving


class FolderOfIds(Dataset[dict[str, Any]]):
    """A ``_target_`` dataset of yours: ``{"index": i}`` per ``<i>.txt`` file in ``root``."""

    def __init__(self, root: str) -> None:
        self.files = sorted(Path(root).glob("*.txt"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": torch.tensor(int(self.files[index].read_text()))}


def _write(folder: Path, kind: str) -> None:
    folder.mkdir()
    for index in range(LENGTH):
        if kind == "tensor_folder":
            torch.save({"index": index}, folder / f"{index:03d}.pt")
        else:
            (folder / f"{index:03d}.txt").write_text(str(index))


DATASETS: dict[str, Callable[[str], dict[str, Any]]] = {
    "tensor_folder": lambda root: {"kind": "tensor_folder", "root": root},
    "target-root": lambda root: {"_target_": f"{HERE}.FolderOfIds", "root": root},
    "target-args": lambda root: {"_target_": f"{HERE}.FolderOfIds", "_args_": [root]},
}


def _config(dataset: str, root: Path | str, workers: int = 0, **more: Any) -> dict[str, Any]:
    return {
        "dataset": DATASETS[dataset](str(root)),
        "loader": {"kind": "torch", "batch_size": 3, "shuffle": True, "num_workers": workers},
        "seed": 5,
        **more,
    }


def _ids(loader: Any) -> list[int]:
    return [i for batch in loader for i in batch["index"].tolist()]


def _save_then_move(dataset: str, old: Path, new: Path, workers: int = 0) -> tuple[list[int], list[int], Any]:
    """(one uninterrupted epoch, the ids of the first ``STOP`` batches, the state after them);
    then the folder moves from ``old`` to ``new``."""
    _write(old, "tensor_folder" if dataset == "tensor_folder" else "text")
    with loaderfactory.build_loader(_config(dataset, old, workers)) as loader:
        epoch = _ids(loader)
    with loaderfactory.build_loader(_config(dataset, old, workers)) as loader:
        before = []
        for batch in loader:
            before += batch["index"].tolist()
            if loader.batches_in_epoch == STOP:
                break
        state = json.loads(json.dumps(loader.state_dict()))
    shutil.move(old, new)
    return epoch, before, state


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dataset", list(DATASETS))
def test_moved_data_resumes_exactly_with_a_warning_naming_both_places(
    dataset: str, workers: int, tmp_path: Path
) -> None:
    """After the folder moves, the rest of the epoch comes from the new place: nothing lost or repeated."""
    old, new = tmp_path / "old", tmp_path / "new"
    epoch, before, state = _save_then_move(dataset, old, new, workers)
    where = "dataset._args_.0" if dataset == "target-args" else "dataset.root"
    named = re.escape(f"{where}: saved {str(old)!r}, now {str(new)!r}")
    with loaderfactory.build_loader(_config(dataset, new, workers)) as loader:
        with pytest.warns(ResumeWarning, match=named):
            loader.load_state_dict(state)
        after = _ids(loader)
    assert before + after == epoch
    assert sorted(before + after) == list(range(LENGTH))


@pytest.mark.parametrize("how", ["config", "argument"])
def test_strict_refuses_a_moved_dataset(how: str, tmp_path: Path) -> None:
    """``resume.strict`` (or ``strict=True``) refuses a state whose data location differs, naming it."""
    old, new = tmp_path / "old", tmp_path / "new"
    _, _, state = _save_then_move("tensor_folder", old, new)
    strict = {"resume": {"strict": True}} if how == "config" else {}
    with (
        loaderfactory.build_loader(_config("tensor_folder", new, **strict)) as loader,
        pytest.raises(ResumeError, match=r"dataset.root: saved .*old', now .*new'.*resume.strict=false"),
    ):
        loader.load_state_dict(state, **({"strict": True} if how == "argument" else {}))


@pytest.mark.parametrize("dataset", ["tensor_folder", "target-root"])
def test_a_moved_dataset_of_another_length_is_refused(dataset: str, tmp_path: Path) -> None:
    """A location may change, the data may not: one file fewer refuses the state, saying both lengths."""
    old, new = tmp_path / "old", tmp_path / "new"
    _, _, state = _save_then_move(dataset, old, new)
    next(new.iterdir()).unlink()
    with (
        loaderfactory.build_loader(_config(dataset, new)) as loader,
        pytest.raises(ResumeError, match=rf"saved for {LENGTH} items, this dataset has {LENGTH - 1}"),
    ):
        loader.load_state_dict(state)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seed": 6}, r"seed: saved 5, now 6"),
        ({"dataset": {"kind": "synthetic", "length": LENGTH}}, r"dataset.kind: saved 'tensor_folder'"),
    ],
)
def test_what_shapes_the_batches_is_refused_beside_a_move(
    change: dict[str, Any], match: str, tmp_path: Path
) -> None:
    """A moved root is no pass for a changed seed or dataset kind of the same length."""
    old, new = tmp_path / "old", tmp_path / "new"
    _, _, state = _save_then_move("tensor_folder", old, new)
    with (
        loaderfactory.build_loader({**_config("tensor_folder", new), **change}) as loader,
        pytest.raises(ResumeError, match=match),
    ):
        loader.load_state_dict(state)


def test_a_relative_path_under_a_plain_name_needs_resume_locations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_args_: [data]`` is not known as a location: refused with a hint, accepted once listed."""
    monkeypatch.chdir(tmp_path)
    epoch, before, state = _save_then_move("target-args", Path("old"), Path("new"))
    with (
        loaderfactory.build_loader(_config("target-args", "new")) as loader,
        pytest.raises(ResumeError, match=r"_args_.0: saved 'old', now 'new'.*resume.locations"),
    ):
        loader.load_state_dict(state)
    listed = _config("target-args", "new", resume={"locations": ["dataset._args_"]})
    with loaderfactory.build_loader(listed) as loader:
        with pytest.warns(ResumeWarning, match=r"dataset._args_.0: saved 'old', now 'new'"):
            loader.load_state_dict(state)
        assert before + _ids(loader) == epoch


def test_the_lightning_data_module_resumes_a_moved_dataset(tmp_path: Path) -> None:
    """``LoaderDataModule.load_state_dict`` (a checkpoint) resumes the moved data with the warning."""
    lightning = pytest.importorskip("loaderfactory.lightning")
    old, new = tmp_path / "old", tmp_path / "new"
    epoch, before, state = _save_then_move("tensor_folder", old, new)
    module = lightning.LoaderDataModule(train=_config("tensor_folder", new))
    module.load_state_dict({"train": state})
    with pytest.warns(ResumeWarning, match=re.escape(f"now {str(new)!r}")):
        module.setup("fit")
    try:
        assert before + _ids(module.train_dataloader()) == epoch
    finally:
        module.teardown("fit")


def with_table(item: dict[str, Any], table_file: str, scale: str) -> dict[str, Any]:
    """A transform of yours reading a file: only named by ``_target_`` below, never called."""
    return item


def test_a_file_of_a_transform_nested_in_the_dataset_is_a_location_too() -> None:
    """Inside tensor_folder's ``preprocess`` compose list, a ``_target_``'s ``table_file`` may move."""
    table = {"_target_": f"{HERE}.with_table", "_partial_": True, "table_file": "/a/t.csv", "scale": "x"}
    preprocess = {"kind": "compose", "transforms": [{"kind": "rand_flip", "dims": [-1]}, table]}
    spec = loaderfactory.validate(
        {"dataset": {"kind": "tensor_folder", "root": "/a", "preprocess": preprocess}}
    )
    assert spec.dataset is not None
    assert spec.dataset.is_location(("preprocess", "transforms", "1", "table_file"), "/a/t.csv", "/b/t.csv")
    assert not spec.dataset.is_location(("preprocess", "transforms", "1", "scale"), "x", "y")
    assert not spec.dataset.is_location(("pattern",), "/a/*.pt", "/b/*.pt")


@pytest.mark.parametrize(
    "key", ["root", "data_dir", "csv_file", "imageRoot", "paths", "base_url", "folder", "cache-dir"]
)
def test_argument_names_that_hold_a_location(key: str) -> None:
    """A ``_target_`` argument whose last word is dir, path, root, file, folder or url is a location."""
    assert names_location(key)


@pytest.mark.parametrize("key", ["split", "rooted_size", "profile_name", "directory_count", "n", "_args_"])
def test_argument_names_that_do_not(key: str) -> None:
    """Other names are not locations, even when a location word is part of them."""
    assert not names_location(key)


@pytest.mark.parametrize(
    ("value", "location"),
    [
        ("/data/train", True),
        ("~/data", True),
        ("./data", True),
        ("../data", True),
        ("C:\\data", True),
        ("s3://bucket/train", True),
        ("https://example.org/x.tar", True),
        ("data/train", False),
        ("imdb", False),
        ("train", False),
    ],
)
def test_values_that_read_as_a_location(value: str, location: bool) -> None:
    """Absolute, home- or dot-relative paths and URLs read as locations; a bare name does not."""
    assert looks_like_location(value) is location
