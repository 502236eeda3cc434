"""Specs of the built-in datasets, and (from :mod:`~loaderfactory.config.specs.target`) of user
datasets named by ``_target_``."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from loaderfactory.config.specs.base import Count, Milliseconds, Seed, Spec, broken_rules
from loaderfactory.config.specs.kinds import DatasetKindSpec
from loaderfactory.config.specs.refs import TransformRef

# Re-exported: it lives with the other _target_ specs, where refs.py (imported here) finds it.
from loaderfactory.config.specs.target import TargetDatasetSpec as TargetDatasetSpec

DType = Literal[
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"
]


class FieldSpec(Spec):
    """One key of a synthetic item: a tensor of ``shape`` and ``dtype``.

    Floats are standard normal; integers are uniform in ``[0, high)``.
    """

    shape: list[Count] = []
    """Tensor shape of one item; [] for a scalar."""
    dtype: DType = "float32"
    """torch dtype name."""
    high: Count = 10
    """Integer fields are uniform in [0, high)."""


def _default_fields() -> dict[str, FieldSpec]:
    return {
        "image": FieldSpec(shape=[3, 32, 32], dtype="float32"),
        "label": FieldSpec(shape=[], dtype="int64", high=10),
    }


class SyntheticDatasetSpec(DatasetKindSpec):
    """Deterministic dict items made from ``seed`` and the index: data without a disk.

    ``delay_ms`` sleeps per item (releasing the GIL) to stand in for slow storage.
    """

    speed_only = frozenset({"delay_ms"})

    kind: Literal["synthetic"] = "synthetic"
    length: Count = 1024
    """Number of items."""
    fields: dict[str, FieldSpec] = Field(default_factory=_default_fields, min_length=1)
    """Key → {shape, dtype, high}; every item also carries its `index` unless `index` is false."""
    seed: Seed = 0
    """Items are a pure function of (seed, index)."""
    delay_ms: Milliseconds = 0.0
    """Sleep per item, standing in for slow storage."""
    index: bool = True
    """Add the item's index under the key `index` (to count ids); false: only `fields`."""

    @model_validator(mode="after")
    def _index_key_is_free(self) -> SyntheticDatasetSpec:
        """With ``index: true`` no field may be called ``index``: the item's index would replace it."""
        if self.index and "index" in self.fields:
            message = (
                "is also the key of the item's index (index: true); rename the field or set index: false"
            )
            raise broken_rules(type(self).__name__, [("fields.index", message, "index")])
        return self

    def known_length(self) -> int:
        return self.length

    def known_keys(self) -> list[str]:
        return [*self.fields, *(["index"] if self.index else [])]


TENSOR_FILE_SUFFIXES = frozenset({".pt", ".pth", ".npy", ".npz"})
"""What ``tensor_folder`` reads; mirrors ``SUFFIXES`` of the runtime dataset (specs never import torch)."""


class TensorFolderSpec(DatasetKindSpec):
    """A folder of ``.pt``/``.pth``, ``.npy`` or ``.npz`` files, one item each, read lazily in sorted order.

    Each file is read by its extension: ``.pt``/``.pth`` hold a dict item, ``.npy`` one array (the
    item ``{array_key: array}``, memory-mapped and copied), ``.npz`` named arrays (one key each).
    ``root`` may change on resume (the files moved): the state is loaded with a warning naming both.
    """

    location_fields = frozenset({"root"})
    # weights_only changes how a .pt file is unpickled, never what it holds: a state saved under one
    # value resumes under the other (and states saved before the field existed still load).
    speed_only = frozenset({"weights_only"})

    kind: Literal["tensor_folder"] = "tensor_folder"
    root: str
    """The folder holding the files (may change on resume: the same files, moved)."""
    pattern: str = "*.pt"
    """Glob selecting the files, relative to root; every match needs a .pt, .pth, .npy or .npz extension."""
    recursive: bool = False
    """Also search subfolders."""
    preprocess: TransformRef | None = None
    """Transform applied to each item as it is loaded."""
    array_key: str = "data"
    """The key a .npy file's array gets in its item."""
    weights_only: bool = True
    """Read .pt/.pth files with torch.load(weights_only=True): tensors and plain data only. false also
    reads numpy arrays and other pickled objects, but runs code from the file: only for trusted files."""

    @field_validator("pattern")
    @classmethod
    def _readable_extension(cls, pattern: str) -> str:
        """A concrete extension is one tensor_folder reads: .pt, .pth, .npy or .npz."""
        # Only a concrete extension can be judged here: `*`, `*.np?` or `**/*` may match readable
        # files, and the dataset refuses what they match beyond them when it is built.
        suffix = PurePosixPath(pattern).suffix
        if suffix and not any(c in suffix for c in "*?[") and suffix.lower() not in TENSOR_FILE_SUFFIXES:
            raise ValueError(
                "tensor_folder reads .pt/.pth (a dict item), .npy (one array) and .npz (named arrays); "
                f"{pattern!r} selects {suffix} files"
            )
        return pattern
