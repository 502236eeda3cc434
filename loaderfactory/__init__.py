"""loaderfactory: validated, registry-built PyTorch data loaders for Hydra apps."""

from __future__ import annotations

from loaderfactory import builtins as _builtins  # noqa: F401 - registers the built-in kinds
from loaderfactory.components.queue_dataset import QueueDataset
from loaderfactory.components.sharded import ShardedDataLoader
from loaderfactory.components.stream import StreamWrapper
from loaderfactory.components.thread_buffer import ThreadBuffer, ThreadDataLoader
from loaderfactory.errors import ConfigError, LoaderFactoryError, ResumeError, StallError, WorkerError
from loaderfactory.factory import build_loader
from loaderfactory.hydra.compose import compose, config_dir
from loaderfactory.loader import Loader
from loaderfactory.registry import available, register
from loaderfactory.specs.base import Spec
from loaderfactory.specs.pipeline import LoaderSpec
from loaderfactory.validation import validate

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
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
    "register",
    "validate",
]
