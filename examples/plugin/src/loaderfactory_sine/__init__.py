"""An example loaderfactory plugin: the ``sine_waves`` dataset and the ``scale`` transform.

Installed, it registers both through the ``loaderfactory.plugins`` entry point; YAML then selects
them by name like any built-in. Its preset ``conf/loaderfactory/dataset/sine.yaml`` (in this
package) reaches Hydra through the ``loaderfactory.configs`` entry point.

This module holds only the specs (pydantic) and the registration: the builders and the dataset,
which need torch, live in :mod:`loaderfactory_sine.data`, imported by ``lazy`` on the first build.
So ``run.mode=validate``, ``run.mode=schema`` and ``--help``, which load every plugin, stay free of
torch, as loaderfactory's own kinds are.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

import loaderfactory
from loaderfactory.config.registry import lazy


class SineWavesSpec(loaderfactory.Spec):
    """Sine waves of random frequency; the label is the frequency bucket."""

    kind: Literal["sine_waves"] = "sine_waves"
    length: PositiveInt = 512
    samples: PositiveInt = 128
    max_hz: PositiveFloat = 8.0
    buckets: int = Field(4, ge=1, le=64)
    seed: int = 0


class ScaleSpec(loaderfactory.Spec):
    """Multiply the tensors under ``apply_on`` by ``factor``."""

    kind: Literal["scale"] = "scale"
    factor: float = 1.0
    apply_on: list[str] = ["wave"]


def register_all() -> None:
    """Entry-point hook: add this package's kinds to loaderfactory's registry (builders imported lazily)."""
    loaderfactory.register(
        "dataset", "sine_waves", SineWavesSpec, lazy(f"{__name__}.data", "build_sine_waves")
    )
    loaderfactory.register("transform", "scale", ScaleSpec, lazy(f"{__name__}.data", "build_scale"))
