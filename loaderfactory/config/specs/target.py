"""``_target_`` specs: a class or factory named by its dotted path, plus its arguments (the Hydra way)."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from loaderfactory.config.specs.base import Spec


class TargetSpec(Spec):
    """``_target_: my.module.Thing`` plus keyword arguments; the target must be importable."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    target: str = Field(alias="_target_")
    """Dotted path of the class or factory; the other keys are its arguments."""

    @field_validator("target")
    @classmethod
    def _importable(cls, target: str) -> str:
        resolve_target(target)
        return target

    @property
    def kwargs(self) -> dict[str, Any]:
        """The arguments for the target, everything but ``_target_``."""
        return dict(self.model_extra or {})


def resolve_target(target: str) -> Any:
    """Import ``a.b.C``; a ``ValueError`` says what could not be found and why."""
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ValueError(f"{target!r} is not a dotted path like 'my_package.datasets.MyDataset'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import module {module_name!r} for {target!r}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
