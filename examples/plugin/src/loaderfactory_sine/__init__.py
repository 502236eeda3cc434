"""An example loaderfactory plugin: the ``sine_waves`` dataset and the ``scale`` transform.

Installed, it registers both through the ``loaderfactory.plugins`` entry point; YAML then selects
them by name like any built-in. Its preset ``conf/loaderfactory/dataset/sine.yaml`` (in this
package) reaches Hydra through the ``loaderfactory.configs`` entry point.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, PositiveFloat, PositiveInt
from torch.utils.data import Dataset

import loaderfactory
from loaderfactory.builders import BuildContext


class SineWavesSpec(loaderfactory.Spec):
    """Sine waves of random frequency; the label is the frequency bucket."""

    kind: Literal["sine_waves"] = "sine_waves"
    length: PositiveInt = 512
    samples: PositiveInt = 128
    max_hz: PositiveFloat = 8.0
    buckets: int = Field(4, ge=1, le=64)
    seed: int = 0


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


class ScaleSpec(loaderfactory.Spec):
    """Multiply the tensors under ``apply_on`` by ``factor``."""

    kind: Literal["scale"] = "scale"
    factor: float = 1.0
    apply_on: list[str] = ["wave"]


def build_sine_waves(spec: SineWavesSpec, upstream: None, context: BuildContext) -> SineWaves:
    return SineWaves(spec.length, spec.samples, spec.max_hz, spec.buckets, spec.seed)


def build_scale(spec: ScaleSpec) -> Any:
    def scale(item: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, Any]:
        return {k: v * spec.factor if k in spec.apply_on else v for k, v in item.items()}

    return scale


def register_all() -> None:
    """Entry-point hook: add this package's kinds to loaderfactory's registry."""
    loaderfactory.register("dataset", "sine_waves", SineWavesSpec, build_sine_waves)
    loaderfactory.register("transform", "scale", ScaleSpec, build_scale)
