"""The plugin's runtime side: the dataset and the builders, which import torch."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import Dataset

from loaderfactory.builders import BuildContext
from loaderfactory_sine import ScaleSpec, SineWavesSpec


class SineWaves(Dataset[dict[str, Any]]):
    def __init__(self, length: int, samples: int, max_hz: float, buckets: int, seed: int) -> None:
        self.length, self.samples, self.max_hz, self.buckets, self.seed = (
            length,
            samples,
            max_hz,
            buckets,
            seed,
        )

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(self.seed * 7919 + index)
        hz = float(torch.rand((), generator=generator)) * self.max_hz
        t = torch.linspace(0, 1, self.samples)
        wave = torch.sin(2 * math.pi * hz * t)
        return {"wave": wave, "label": min(int(hz / self.max_hz * self.buckets), self.buckets - 1)}


def build_sine_waves(spec: SineWavesSpec, upstream: None, context: BuildContext) -> SineWaves:
    return SineWaves(spec.length, spec.samples, spec.max_hz, spec.buckets, spec.seed)


def build_scale(spec: ScaleSpec) -> Any:
    def scale(item: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, Any]:
        return {k: v * spec.factor if k in spec.apply_on else v for k, v in item.items()}

    return scale
