"""``tensor_folder``'s ``weights_only``: .pt files of numpy arrays, refused clearly or read on request."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory import build_loader
from loaderfactory.components.data.datasets import TensorFolderDataset

LENGTH = 4


def _numpy_items(folder: Path) -> None:
    """``.pt`` files of dict items whose ``x`` is a numpy array (what ``torch.save`` of numpy data writes)."""
    for index in range(LENGTH):
        torch.save({"x": np.arange(3) + index, "index": index}, folder / f"{index:02d}.pt")


def test_a_numpy_pt_file_is_a_short_error_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    """By default such a file is refused in a few lines: the file, numpy, and the option to set."""
    _numpy_items(tmp_path)
    dataset = TensorFolderDataset(tmp_path)
    first = re.escape(str(tmp_path / "00.pt"))
    with pytest.raises(ValueError, match=rf"^{first}: holds .*numpy.*dataset.weights_only=false") as caught:
        dataset[0]
    message = str(caught.value)
    assert "Weights only load failed" not in message and len(message) < 400
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("workers", [0, 2])
def test_weights_only_false_reads_numpy_pt_files_through_a_config(workers: int, tmp_path: Path) -> None:
    """``dataset.weights_only: false`` reads every item, its numpy array as a tensor of its values."""
    _numpy_items(tmp_path)
    config = {
        "dataset": {"kind": "tensor_folder", "root": str(tmp_path), "weights_only": False},
        "loader": {"kind": "torch", "batch_size": 2, "num_workers": workers},
    }
    with build_loader(config) as loader:
        batches = list(loader)
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(LENGTH))
    x = torch.cat([b["x"] for b in batches])
    assert x.tolist() == [[i, i + 1, i + 2] for i in range(LENGTH)]


def test_the_default_refuses_through_a_config_too(tmp_path: Path) -> None:
    """The config's default is weights_only: true, so the loader raises the short error."""
    _numpy_items(tmp_path)
    config = {
        "dataset": {"kind": "tensor_folder", "root": str(tmp_path)},
        "loader": {"kind": "torch", "batch_size": 2},
    }
    with build_loader(config) as loader, pytest.raises(ValueError, match=r"weights_only=false"):
        next(iter(loader))


def test_a_corrupt_pt_file_is_named_as_unreadable_in_one_line(tmp_path: Path) -> None:
    """Broken bytes are called unreadable, with the unpickler's complaint, not said to hold numpy."""
    (tmp_path / "00.pt").write_bytes(b"\x80\x02not a pickle")
    with pytest.raises(
        ValueError, match=r"00.pt: cannot read it as a .pt file: torch.load\(weights_only=True\) refused it"
    ) as caught:
        TensorFolderDataset(tmp_path)[0]
    assert "numpy" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_state_saved_under_one_weights_only_resumes_under_the_other(tmp_path: Path) -> None:
    """weights_only changes how files are unpickled, not the batches: the rest of the epoch follows."""
    for index in range(LENGTH):
        torch.save({"index": index}, tmp_path / f"{index:02d}.pt")

    def config(weights_only: bool) -> dict[str, Any]:
        dataset = {"kind": "tensor_folder", "root": str(tmp_path), "weights_only": weights_only}
        return {"dataset": dataset, "loader": {"kind": "torch", "batch_size": 1, "shuffle": True}, "seed": 3}

    with build_loader(config(False)) as loader:
        epoch = [int(b["index"]) for b in loader]
    with build_loader(config(False)) as loader:
        before = [int(next(iter(loader))["index"])]
        state = json.loads(json.dumps(loader.state_dict()))
    with build_loader(config(True)) as loader:
        loader.load_state_dict(state)
        assert before + [int(b["index"]) for b in loader] == epoch
