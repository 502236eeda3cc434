"""Specs of the built-in transforms (:mod:`loaderfactory.components.data.transforms`).

Every transform takes ``apply_on`` (keys; ``null``: every tensor it can handle); random ones take a
probability ``p``. Dims count from the end, so one spec works per sample and per batch. Every number
is finite: YAML's ``.nan`` or ``.inf`` would turn each tensor they touch into NaNs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, field_validator

from loaderfactory.config.specs.base import Finite, Spec, alias
from loaderfactory.config.specs.dataset import DType
from loaderfactory.config.specs.refs import TransformRef

Probability = Annotated[Finite, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[Finite, Field(ge=0.0)]
Positive = Annotated[Finite, Field(gt=0.0)]


def _spatial_dims(dims: list[int]) -> list[int]:
    if not dims or any(d >= 0 for d in dims) or len(set(dims)) != len(dims):
        raise ValueError(
            f"must be distinct negative dims counted from the end, e.g. [-3, -2, -1]; got {dims}"
        )
    return dims


class ComposeSpec(Spec):
    """Apply ``transforms`` in order; ``apply_on`` (if set) replaces each child's own keys."""

    kind: Literal["compose"] = "compose"
    transforms: list[TransformRef] = Field(min_length=1)
    """Applied in order to each item."""
    apply_on: list[str] | None = None
    """Keys for every built-in child, replacing their own; ``null`` keeps each child's."""
    p: Probability = 1.0
    """Probability of applying the whole chain on a call."""


class RandFlipSpec(Spec):
    """Flip each of ``dims`` independently with probability ``p``."""

    kind: Literal["rand_flip"] = "rand_flip"
    dims: list[int] = Field(default_factory=lambda: [-3, -2, -1])
    """Dims that may flip, negative (counted from the end)."""
    apply_on: list[str] | None = None
    """Keys to transform; ``null``: every tensor it can handle."""
    p: Probability = Field(0.5, validation_alias=alias("p", "flip_probability"))
    """Probability of flipping each dim, drawn independently per dim."""

    @field_validator("dims")
    @classmethod
    def _check_dims(cls, dims: list[int]) -> list[int]:
        """Distinct negative dims, at least one."""
        return _spatial_dims(dims)


class RandPermuteSpec(Spec):
    """Permute ``dims`` in a random order, with probability ``p`` (cubic volumes keep their shape)."""

    kind: Literal["rand_permute"] = "rand_permute"
    dims: list[int] = Field(default_factory=lambda: [-3, -2, -1])
    """Dims whose order is shuffled, negative (counted from the end)."""
    apply_on: list[str] | None = None
    """Keys to transform; ``null``: every tensor it can handle."""
    p: Probability = 1.0
    """Probability of permuting at all on a call."""

    @field_validator("dims")
    @classmethod
    def _check_dims(cls, dims: list[int]) -> list[int]:
        """Distinct negative dims, at least one."""
        return _spatial_dims(dims)


class GaussianNoiseSpec(Spec):
    """Add ``N(mean, std²)`` noise to float tensors, with probability ``p``."""

    kind: Literal["gaussian_noise"] = "gaussian_noise"
    std: NonNegative = Field(0.01, validation_alias=alias("std", "std_deviation"))
    """Standard deviation of the noise."""
    mean: Finite = 0.0
    """Mean of the noise."""
    apply_on: list[str] | None = None
    """Keys to transform; ``null``: every float tensor."""
    p: Probability = 1.0
    """Probability of adding noise on a call."""


class NormalizeSpec(Spec):
    """``(x - mean) / std`` on float tensors; ``null`` uses each tensor's own mean or std.

    Lists are per channel along ``channel_dim`` (0 for samples, 1 in batch transforms).
    """

    kind: Literal["normalize"] = "normalize"
    mean: Finite | list[Finite] | None = None
    """Subtracted: one value, one per channel, or ``null`` for each tensor's own mean."""
    std: Positive | list[Positive] | None = None
    """Divided by (plus ``eps``): one value, one per channel, or ``null`` for the tensor's own."""
    channel_dim: int = 0
    """Dim the per-channel lists run along (0 for samples, 1 in batch transforms)."""
    eps: Positive = 1e-8
    """Added to the std so a constant tensor does not divide by zero."""
    apply_on: list[str] | None = None
    """Keys to transform; ``null``: every float tensor."""


class RandomCropSpec(Spec):
    """Crop the trailing ``len(size)`` dims to ``size`` at one random offset shared by all keys."""

    kind: Literal["random_crop"] = "random_crop"
    size: list[PositiveInt] = Field(min_length=1)
    """Crop size of the trailing dims, one entry per dim."""
    apply_on: list[str] | None = None
    """Keys to crop, all alike; ``null``: every tensor with enough dims."""


class ToDtypeSpec(Spec):
    """Convert tensors to ``dtype``."""

    kind: Literal["to_dtype"] = "to_dtype"
    dtype: DType
    """torch dtype name to convert to."""
    apply_on: list[str] | None = None
    """Keys to transform; ``null``: every tensor it can handle."""
