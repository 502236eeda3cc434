"""Specs of collate functions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from loaderfactory.config.specs.base import alias
from loaderfactory.config.specs.kinds import CollateKindSpec


class DefaultCollateSpec(CollateKindSpec):
    """torch's ``default_collate``: stacks tensors, converts numbers and arrays, recurses into dicts."""

    kind: Literal["default"] = "default"


class DictCollateSpec(CollateKindSpec):
    """Merge dict items into a dict batch: stack equal-shape tensors, list the rest.

    Use it for items whose tensors may not all stack (``default`` would raise), or to keep only
    some keys (``keys: [vol, tf_tex]``).
    """

    kind: Literal["dict"] = "dict"
    keys: list[str] | None = Field(None, validation_alias=alias("keys", "key_filter"))
    """Keep only these keys; ``null`` keeps all."""
    stack_tensors: bool = True
    """Stack tensors of equal shape; ``false`` gives lists of tensors."""
    convert_numpy: bool = Field(True, validation_alias=alias("convert_numpy", "convert_np"))
    """Turn numpy arrays and scalars into tensors first."""
    convert_numbers: bool = True
    """Turn Python numbers (not bools) into tensors first."""
    on_unstackable: Literal["warn", "error", "list"] = "warn"
    """Tensors of different shapes under one key: a list plus a warning, an error, or a list."""

    def wanted_keys(self) -> list[str]:
        return list(self.keys or [])


class TupleCollateSpec(CollateKindSpec):
    """Collate dict items into a tuple batch in ``keys`` order, so ``x, y = batch`` works.

    ``{kind: tuple, keys: [image, label]}`` gives ``(images, labels)``, each made by torch's
    ``default_collate``; other keys are left out.
    """

    kind: Literal["tuple"] = "tuple"
    keys: list[str] = Field(min_length=1)
    """The item keys, in the order of the tuple."""

    def wanted_keys(self) -> list[str]:
        return list(self.keys)

    @field_validator("keys")
    @classmethod
    def _no_repeats(cls, keys: list[str]) -> list[str]:
        """Each key once: a key twice is a typo for another."""
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"must not repeat a key, got {repeated} more than once")
        return keys


class RingCollateSpec(CollateKindSpec):
    """Collate like ``dict``, stacking tensors into a ring of reused buffers instead of new ones.

    Several times faster on large items, but a batch stays valid only until ``ring_size`` more
    batches are collated: for consumers that copy or consume each batch before drawing more
    (moving it to the GPU); ``ring_size`` must also cover the batches read ahead after the collate,
    which validation checks against the pipeline (:mod:`loaderfactory.rules.ring`).
    """

    kind: Literal["ring"] = "ring"
    ring_size: int = Field(4, ge=2, strict=True)
    """Buffer sets in the ring: a batch stays valid until this many more are collated."""
    keys: list[str] | None = None
    """Keep only these keys of dict items; ``null`` keeps all."""
    pin_memory: bool = False
    """Allocate the buffers in pinned memory; a no-op without an accelerator or in worker processes."""

    def reused_batches(self) -> int:
        return self.ring_size

    def wanted_keys(self) -> list[str]:
        return list(self.keys or [])
