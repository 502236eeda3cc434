"""The ``_target_`` of the shipped root config: ``hydra.utils.instantiate(cfg)`` returns a ``Loader``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from loaderfactory.factory import build_loader
from loaderfactory.loader import Loader


def make_loader(**config: Any) -> Loader:
    """Build a :class:`Loader` from the slots Hydra passes as keyword arguments.

    ``dataset`` may be a dataset object (``instantiate(cfg.data, dataset=my_dataset)``).
    Use with ``_recursive_: false`` so Hydra leaves a ``_target_`` dataset to us to validate.
    """
    dataset = config.get("dataset")
    if dataset is not None and not isinstance(dataset, Mapping | DictConfig):
        config = {k: v for k, v in config.items() if k != "dataset"}
        return build_loader(config, dataset=dataset)
    return build_loader(config)
