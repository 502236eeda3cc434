"""Builders of the ``dataset`` slot."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_helper
from loaderfactory.builders.targets import instantiate_target
from loaderfactory.components.data.datasets import SyntheticDataset, TensorFolderDataset
from loaderfactory.config.specs.dataset import (
    SyntheticDatasetSpec,
    TargetDatasetSpec,
    TensorFolderSpec,
)
from loaderfactory.errors import ConfigError, ConfigProblem


def build_synthetic(spec: SyntheticDatasetSpec, upstream: None, context: BuildContext) -> SyntheticDataset:
    fields = {key: field.model_dump() for key, field in spec.fields.items()}
    return SyntheticDataset(spec.length, fields, spec.seed, spec.delay_ms, index=spec.index)


def build_tensor_folder(spec: TensorFolderSpec, upstream: None, context: BuildContext) -> TensorFolderDataset:
    # Built outside the `try`: a transform's own ConfigError is a ValueError too, and keeps its path.
    preprocess = build_helper("transform", spec.preprocess, "dataset.preprocess")
    try:
        return TensorFolderDataset(
            spec.root,
            spec.pattern,
            spec.recursive,
            preprocess,
            array_key=spec.array_key,
            weights_only=spec.weights_only,
        )
    except FileNotFoundError as err:
        raise ConfigError(ConfigProblem("dataset.root", str(err))) from err
    except ValueError as err:  # matched files of an extension it cannot read
        raise ConfigError(ConfigProblem("dataset.pattern", str(err))) from err


def build_target(spec: TargetDatasetSpec, upstream: None, context: BuildContext) -> Any:
    return instantiate_target(spec, "dataset")
