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
from loaderfactory.config.specs import transforms as specs


def build_compose(spec: specs.ComposeSpec) -> Compose:
    children = [build_helper("transform", child) for child in spec.transforms]
    return Compose([c for c in children if c is not None], apply_on=spec.apply_on, p=spec.p)


def build_rand_flip(spec: specs.RandFlipSpec) -> RandFlip:
    return RandFlip(spec.dims, spec.apply_on, spec.p)


def build_rand_permute(spec: specs.RandPermuteSpec) -> RandPermute:
    return RandPermute(spec.dims, spec.apply_on, spec.p)


def build_gaussian_noise(spec: specs.GaussianNoiseSpec) -> GaussianNoise:
    return GaussianNoise(spec.std, spec.mean, spec.apply_on, spec.p)


def build_normalize(spec: specs.NormalizeSpec) -> Normalize:
    return Normalize(spec.mean, spec.std, spec.channel_dim, spec.eps, spec.apply_on)


def build_random_crop(spec: specs.RandomCropSpec) -> RandomCrop:
    return RandomCrop(spec.size, spec.apply_on)


def build_to_dtype(spec: specs.ToDtypeSpec) -> ToDtype:
    return ToDtype(spec.dtype, spec.apply_on)
