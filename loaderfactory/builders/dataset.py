"""Builders of the ``dataset`` slot."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.data.datasets import SyntheticDataset, TensorFolderDataset
from loaderfactory.config.specs.dataset import (
    SyntheticDatasetSpec,
    TargetDatasetSpec,
    TensorFolderSpec,
)
from loaderfactory.config.specs.target import resolve_target
from loaderfactory.errors import ConfigError, ConfigProblem


def build_synthetic(spec: SyntheticDatasetSpec, upstream: None, context: BuildContext) -> SyntheticDataset:
    fields = {key: field.model_dump() for key, field in spec.fields.items()}
    return SyntheticDataset(spec.length, fields, spec.seed, spec.delay_ms)


def build_tensor_folder(spec: TensorFolderSpec, upstream: None, context: BuildContext) -> TensorFolderDataset:
    try:
        return TensorFolderDataset(
            spec.root, spec.pattern, spec.recursive, build_helper("transform", spec.preprocess)
        )
    except FileNotFoundError as err:
        raise ConfigError(ConfigProblem("dataset.root", str(err))) from err


def build_target(spec: TargetDatasetSpec, upstream: None, context: BuildContext) -> Any:
    target = resolve_target(spec.target)
    try:
        return target(**spec.kwargs)
    except TypeError as err:
        raise ConfigError(
            ConfigProblem("dataset", f"{spec.target}({', '.join(spec.kwargs)}): {err}")
        ) from err
