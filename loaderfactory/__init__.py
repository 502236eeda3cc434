"""loaderfactory: validated, registry-built PyTorch data loaders for Hydra apps.

Names are imported on first use, so ``from loaderfactory import ThreadBuffer`` loads the runtime
component alone: neither pydantic, Hydra nor OmegaConf. The config layer (specs, registry,
validation) loads with the first name that needs it, and registers the built-in kinds then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ArgumentError": "loaderfactory.errors",
    "ConfigError": "loaderfactory.errors",
    "Contract": "loaderfactory.config.registry",
    "ForwardEpochOrder": "loaderfactory.components.order_forwarding",
    "Loader": "loaderfactory.loader",
    "LoaderFactoryError": "loaderfactory.errors",
    "LoaderSpec": "loaderfactory.config.specs.pipeline",
    "QueueDataset": "loaderfactory.components.queue",
    "ResumeError": "loaderfactory.errors",
    "ShardedDataLoader": "loaderfactory.components.sharded",
    "Spec": "loaderfactory.config.specs.base",
    "StallError": "loaderfactory.errors",
    "StreamWrapper": "loaderfactory.components.stream",
    "ThreadBuffer": "loaderfactory.components.thread",
    "ThreadDataLoader": "loaderfactory.components.thread",
    "WorkerError": "loaderfactory.errors",
    "available": "loaderfactory.config.registry",
    "build_loader": "loaderfactory.factory",
    "compose": "loaderfactory.hydra.compose",
    "config_dir": "loaderfactory.hydra.compose",
    "pack": "loaderfactory.shards.pack",
    "register": "loaderfactory.config.registry",
    "validate": "loaderfactory.intake",
}
"""Public name → the module that defines it."""

__all__ = [
    "ArgumentError",
    "ConfigError",
    "Contract",
    "ForwardEpochOrder",
    "Loader",
    "LoaderFactoryError",
    "LoaderSpec",
    "QueueDataset",
    "ResumeError",
    "ShardedDataLoader",
    "Spec",
    "StallError",
    "StreamWrapper",
    "ThreadBuffer",
    "ThreadDataLoader",
    "WorkerError",
    "available",
    "build_loader",
    "compose",
    "config_dir",
    "pack",
    "register",
    "validate",
]

if TYPE_CHECKING:
    from loaderfactory.components.order_forwarding import ForwardEpochOrder
    from loaderfactory.components.queue import QueueDataset
    from loaderfactory.components.sharded import ShardedDataLoader
    from loaderfactory.components.stream import StreamWrapper
    from loaderfactory.components.thread import ThreadBuffer, ThreadDataLoader
    from loaderfactory.config.registry import Contract, available, register
    from loaderfactory.config.specs.base import Spec
    from loaderfactory.config.specs.pipeline import LoaderSpec
    from loaderfactory.errors import (
        ArgumentError,
        ConfigError,
        LoaderFactoryError,
        ResumeError,
        StallError,
        WorkerError,
    )
    from loaderfactory.factory import build_loader
    from loaderfactory.hydra.compose import compose, config_dir
    from loaderfactory.intake import validate
    from loaderfactory.loader import Loader
    from loaderfactory.shards.pack import pack


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loaderfactory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
