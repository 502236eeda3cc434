"""Deprecated: :mod:`loaderfactory.components.steps` under its former name.

``loaderfactory.components.sharded`` and its modules (``.loader``, ``.sampling``, ...) still import,
with a ``DeprecationWarning``, and give the very objects of ``loaderfactory.components.steps``. The
folder was renamed so that it cannot be taken for :mod:`loaderfactory.shards` (shard files).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from typing import Any

from loaderfactory.components import steps

warnings.warn(
    "loaderfactory.components.sharded is deprecated: import from loaderfactory.components.steps "
    "(the same ShardedDataLoader; the loader kind is still 'sharded')",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = steps.__all__

# The old module names are the new modules themselves, so classes and module state are shared.
for _module in pkgutil.iter_modules(steps.__path__):
    sys.modules[f"{__name__}.{_module.name}"] = importlib.import_module(f"{steps.__name__}.{_module.name}")


def __getattr__(name: str) -> Any:
    return getattr(steps, name)
