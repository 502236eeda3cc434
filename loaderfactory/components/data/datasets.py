"""Built-in map-style datasets of dict items: ``SyntheticDataset`` and ``TensorFolderDataset``."""

from __future__ import annotations

import pickle
import re
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

Item = dict[str, Any]

_DEFAULT_FIELDS: dict[str, dict[str, Any]] = {
    "image": {"shape": [3, 32, 32], "dtype": "float32"},
    "label": {"shape": [], "dtype": "int64", "high": 10},
}


class SyntheticDataset(Dataset[Item]):
    """Deterministic dict items computed from ``seed`` and the index: data without a disk.

    The same ``(seed, index)`` always gives the same item, in any process and any order, so
    tests can check exactly what a loader delivered. Floats are standard normal, integers uniform
    in ``[0, high)``, booleans fair coins.

    Args:
        length: number of items.
        fields: key → ``{"shape": [...], "dtype": "float32", "high": 10}``.
        seed: base seed.
        delay_ms: sleep per item (releases the GIL), standing in for slow storage.
        index: add the item's index under ``"index"`` (what tests count ids by); ``False`` gives
            only ``fields``, as a model's data would (``TupleCollate``, ``default_collate``).
    """

    def __init__(
        self,
        length: int = 1024,
        fields: Mapping[str, Mapping[str, Any]] | None = None,
        seed: int = 0,
        delay_ms: float = 0.0,
        index: bool = True,
    ) -> None:
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        self.length = length
        self.fields = {k: dict(v) for k, v in (fields or _DEFAULT_FIELDS).items()}
        self.seed = seed
        self.delay_ms = delay_ms
        self.index = index
        if index and "index" in self.fields:
            raise ValueError("fields has a key 'index', which the item's own index would replace; rename it")
        self._dtypes = {k: getattr(torch, str(v.get("dtype", "float32"))) for k, v in self.fields.items()}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Item:
        if not -self.length <= index < self.length:
            raise IndexError(f"index {index} out of range for a dataset of {self.length} items")
        index %= self.length
        if self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        item: Item = {}
        for key, field in self.fields.items():
            shape = tuple(field.get("shape", ()))
            dtype = self._dtypes[key]
            if dtype.is_floating_point:
                item[key] = torch.randn(shape, generator=generator).to(dtype)
            elif dtype == torch.bool:
                item[key] = torch.randint(0, 2, shape, generator=generator).bool()
            else:
                item[key] = torch.randint(
                    0, int(field.get("high", 10)), shape, generator=generator, dtype=dtype
                )
        if self.index:
            item["index"] = index
        return item


SUFFIXES = (".pt", ".pth", ".npy", ".npz")
"""File extensions ``TensorFolderDataset`` reads (compared lower-case); the spec mirrors them."""
READS = "tensor_folder reads .pt/.pth (a dict item), .npy (one array) and .npz (named arrays)"

_READ_ERRORS = (EOFError, RuntimeError, TypeError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)
"""What the readers raise for a file whose bytes are not what its extension says (truncated, another
format, an array dtype torch lacks). ``OSError`` is left alone: its message already names the file."""


class TensorFolderDataset(Dataset[Item]):
    """A folder of tensor files, one item each, read lazily in sorted path order.

    Each file is read by its extension: ``.pt``/``.pth`` with ``torch.load(weights_only=...)`` and
    must hold a dict; ``.npy`` is memory-mapped and copied into a writable tensor, the item
    ``{array_key: tensor}``; ``.npz`` gives a dict of its named arrays. Matched files of any other
    extension are refused at construction; a file that cannot be read is a ``ValueError`` naming it.

    Args:
        root: the folder.
        pattern: glob for the files, relative to ``root``.
        recursive: also search subfolders.
        preprocess: applied to each item after loading (e.g. a transform from the registry).
        array_key: the key a ``.npy`` file's array gets in its item.
        weights_only: read ``.pt``/``.pth`` files with ``torch.load(weights_only=True)`` (tensors and
            plain data only); ``False`` also reads numpy arrays and other pickled objects, but runs
            code from the file: only for files you trust. A file that needs it, read with ``True``,
            is a short ``ValueError`` naming the file and the object it holds.
    """

    def __init__(
        self,
        root: str | Path,
        pattern: str = "*.pt",
        recursive: bool = False,
        preprocess: Callable[[Item], Item] | None = None,
        array_key: str = "data",
        weights_only: bool = True,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"tensor_folder: {str(self.root)!r} is not a folder")
        found = self.root.rglob(pattern) if recursive else self.root.glob(pattern)
        self.files = sorted(p for p in found if p.is_file())
        if not self.files:
            raise FileNotFoundError(f"tensor_folder: no files match {pattern!r} in {str(self.root)!r}")
        others = [p for p in self.files if p.suffix.lower() not in SUFFIXES]
        if others:
            shown = ", ".join(repr(str(p.relative_to(self.root))) for p in others[:3])
            more = f" and {len(others) - 3} more" if len(others) > 3 else ""
            readable = sorted({p.suffix.lower() for p in self.files} & set(SUFFIXES))
            example = f"*{readable[0]}" if len(readable) == 1 else "*.npy"
            raise ValueError(
                f"{READS}; {pattern!r} also matches {shown}{more} in {str(self.root)!r}; "
                f"narrow the pattern, e.g. {example!r}"
            )
        self.preprocess = preprocess
        self.array_key = array_key
        self.weights_only = weights_only

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Item:
        path = self.files[index]
        suffix = path.suffix.lower()
        try:
            item = self._read(path, suffix)
        except pickle.UnpicklingError as err:
            if self.weights_only and _WEIGHTS_ONLY_REFUSAL in str(err):
                # from None: torch's own message is a page long and its advice is this one.
                raise ValueError(_needs_pickle(path, str(err))) from None
            raise ValueError(f"{path}: cannot read it as a {suffix} file: {err}") from err
        except _READ_ERRORS as err:
            raise ValueError(f"{path}: cannot read it as a {suffix} file: {err}") from err
        if not isinstance(item, dict):
            raise TypeError(f"{path}: holds a {type(item).__name__}; tensor_folder files must hold a dict")
        if self.preprocess is not None:
            item = self.preprocess(item)
        return dict(item)

    def _read(self, path: Path, suffix: str) -> Any:
        if suffix == ".npy":
            array = np.load(path, mmap_mode="r")
            if not isinstance(array, np.ndarray):  # an .npz archive named .npy
                array.close()
                raise ValueError("holds an .npz archive, not one array; rename it to .npz")
            return {self.array_key: _tensor(array)}
        if suffix == ".npz":
            # Our own handle: np.load leaves the file open when it is not a zip archive.
            with open(path, "rb") as handle, np.load(handle) as archive:
                return {key: _tensor(archive[key]) for key in archive.files}
        return torch.load(path, weights_only=self.weights_only)


_WEIGHTS_ONLY_REFUSAL = "Weights only load failed"
"""How torch's ``weights_only=True`` refusal starts, told apart from a corrupted file."""


def _needs_pickle(path: Path, refusal: str) -> str:
    """Short text for a file ``torch.load(weights_only=True)`` refuses: the object it holds (a numpy
    array, say), or the unpickler's complaint (a corrupt file)."""
    found = re.search(r"GLOBAL ([\w.]+)", refusal)
    if found is None:
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", refusal)
        why = detail.group(1).strip() if detail else "not a plain-data pickle"
        return (
            f"{path}: cannot read it as a .pt file: torch.load(weights_only=True) refused it ({why}); "
            "the file is corrupt, or holds objects only dataset.weights_only=false reads (trusted files only)"
        )
    held = f"a {found.group(1)} object" + (" (numpy arrays)" if found.group(1).startswith("numpy") else "")
    return (
        f"{path}: holds {held}, which torch.load(weights_only=True) refuses to unpickle; if the files "
        "are trusted, set dataset.weights_only=false (TensorFolderDataset(weights_only=False)): it runs "
        "code from the files. Or save them with tensors (torch.from_numpy) or as .npy/.npz"
    )


def _tensor(array: np.ndarray[Any, Any]) -> torch.Tensor:
    """A writable tensor of ``array``'s values: a read-only memmap or a big-endian array is copied."""
    native = np.require(array, dtype=array.dtype.newbyteorder("="), requirements=["C", "W", "E"])
    return torch.from_numpy(native)
