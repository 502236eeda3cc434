"""loaderfactory: validated, registry-built PyTorch data loaders for Hydra apps.

Names are imported on first use, so ``from loaderfactory import ThreadBuffer`` loads the runtime
component alone: neither pydantic, Hydra nor OmegaConf. The config layer (specs, registry,
validation) loads with the first name that needs it, and registers the built-in kinds then.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from loaderfactory.lazy_names import lazy_exports

__version__ = "0.1.0"

# The public API, one line per name and the only place it is written: type checkers read these lines
# as re-exports, and _public_names() reads them as the table of what to import on first use.
if TYPE_CHECKING:
    from loaderfactory.components.order_forwarding import ForwardEpochOrder as ForwardEpochOrder
    from loaderfactory.components.queue import QueueDataset as QueueDataset
    from loaderfactory.components.steps import ShardedDataLoader as ShardedDataLoader
    from loaderfactory.components.stream import StreamWrapper as StreamWrapper
    from loaderfactory.components.thread import ThreadBuffer as ThreadBuffer
    from loaderfactory.components.thread import ThreadDataLoader as ThreadDataLoader
    from loaderfactory.config.registry import Contract as Contract
    from loaderfactory.config.registry import available as available
    from loaderfactory.config.registry import register as register
    from loaderfactory.config.specs.base import Spec as Spec
    from loaderfactory.config.specs.pipeline import LoaderSpec as LoaderSpec
    from loaderfactory.errors import ArgumentError as ArgumentError
    from loaderfactory.errors import ConfigError as ConfigError
    from loaderfactory.errors import LoaderFactoryError as LoaderFactoryError
    from loaderfactory.errors import ResumeError as ResumeError
    from loaderfactory.errors import StallError as StallError
    from loaderfactory.errors import WorkerError as WorkerError
    from loaderfactory.factory import build_loader as build_loader
    from loaderfactory.hydra.compose import compose as compose
    from loaderfactory.hydra.compose import config_dir as config_dir
    from loaderfactory.intake import validate as validate
    from loaderfactory.loader import Loader as Loader
    from loaderfactory.shards.write.pack import pack as pack


def _public_names() -> dict[str, str]:
    """Public name → the module that defines it, read from the ``if TYPE_CHECKING:`` block above,
    which type checkers see as imports (``X as X`` marks a re-export) and Python never runs."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If))
    imports = [node for node in block.body if isinstance(node, ast.ImportFrom)]
    return {alias.name: str(node.module) for node in imports for alias in node.names}


_EXPORTS = _public_names()
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
