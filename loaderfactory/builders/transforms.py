"""Builders of the built-in transforms: spec → ``transform(item, generator=None) -> dict``."""

from __future__ import annotations

from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.data.transforms import (
    Compose,
    GaussianNoise,
    Normalize,
    RandFlip,
    RandomCrop,
    RandPermute,
    ToDtype,
)
from loaderfactory.config.specs.transforms import (
    ComposeSpec,
    GaussianNoiseSpec,
    NormalizeSpec,
    RandFlipSpec,
    RandomCropSpec,
    RandPermuteSpec,
    ToDtypeSpec,
)


def build_compose(spec: ComposeSpec) -> Compose:
    children = [build_helper("transform", child) for child in spec.transforms]
    return Compose([c for c in children if c is not None], apply_on=spec.apply_on, p=spec.p)


def build_rand_flip(spec: RandFlipSpec) -> RandFlip:
    return RandFlip(spec.dims, spec.apply_on, spec.p)


def build_rand_permute(spec: RandPermuteSpec) -> RandPermute:
    return RandPermute(spec.dims, spec.apply_on, spec.p)


def build_gaussian_noise(spec: GaussianNoiseSpec) -> GaussianNoise:
    return GaussianNoise(spec.std, spec.mean, spec.apply_on, spec.p)


def build_normalize(spec: NormalizeSpec) -> Normalize:
    return Normalize(spec.mean, spec.std, spec.channel_dim, spec.eps, spec.apply_on)


def build_random_crop(spec: RandomCropSpec) -> RandomCrop:
    return RandomCrop(spec.size, spec.apply_on)


def build_to_dtype(spec: ToDtypeSpec) -> ToDtype:
    return ToDtype(spec.dtype, spec.apply_on)
