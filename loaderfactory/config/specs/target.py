"""``_target_`` specs: a class or factory named by its dotted path, plus its arguments (the Hydra way).

Validation checks that every ``_target_`` (nested ones too) can be imported; building calls
``hydra.utils.instantiate``, so ``_args_``, ``_partial_``, ``_convert_``, ``_recursive_`` and nested
``_target_`` nodes mean what they mean in Hydra.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from loaderfactory.config.specs.base import Spec, broken_rules
from loaderfactory.config.specs.locations import is_location_argument

HYDRA_TARGET_KEYS = ("_args_", "_partial_", "_convert_", "_recursive_")
"""Keys beside ``_target_`` that ``hydra.utils.instantiate`` reads instead of passing them on."""


class TargetSpec(Spec):
    """``_target_: my.module.Thing`` plus keyword arguments; the target must be importable."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    target: str = Field(alias="_target_")
    """Dotted path of the class or factory; the other keys are its arguments."""

    @field_validator("target")
    @classmethod
    def _importable(cls, target: str) -> str:
        """A dotted path that imports (module, then attribute)."""
        resolve_target(target)
        return target

    @model_validator(mode="after")
    def _nested_targets_importable(self) -> TargetSpec:
        """Every nested _target_ imports too."""
        problems = [
            (path, str(err), target)
            for path, target in _nested_targets(self.model_extra or {}, "")
            for err in _import_problem(target)
        ]
        if problems:
            raise broken_rules(type(self).__name__, problems)
        return self

    def is_location(self, path: tuple[str, ...], saved: str, now: str) -> bool:
        """Arguments are classified by name or value (see :mod:`loaderfactory.config.specs.locations`)."""
        return is_location_argument(path, saved, now)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The target's arguments and Hydra's keys (``_args_``, ``_partial_``, ...): all but ``_target_``."""
        return dict(self.model_extra or {})

    @property
    def config(self) -> dict[str, Any]:
        """The node as ``hydra.utils.instantiate`` takes it."""
        return {"_target_": self.target, **self.kwargs}


def _nested_targets(node: Any, path: str) -> list[tuple[str, Any]]:
    """``(dotted path, value)`` of every ``_target_`` inside ``node``."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "_target_":
                found.append((where, value))
            else:
                found.extend(_nested_targets(value, where))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_nested_targets(value, f"{path}.{index}" if path else str(index)))
    return found


def _import_problem(target: Any) -> list[ValueError]:
    if not isinstance(target, str):
        return [ValueError(f"must be a dotted path like 'my_package.MyClass', got {target!r}")]
    try:
        resolve_target(target)
    except ValueError as err:
        return [err]
    return []


def resolve_target(target: str) -> Any:
    """Import ``a.b.C``; a ``ValueError`` says what could not be found and why."""
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ValueError(f"{target!r} is not a dotted path like 'my_package.datasets.MyDataset'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"cannot import module {module_name!r} for {target!r}: {_why(module_name, err)}"
        ) from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None


def _why(module_name: str, err: ImportError) -> str:
    """The import error, and where Python looked when the module itself (not one it imports) is missing."""
    text = f"{type(err).__name__}: {err}"
    missing = err.name if isinstance(err, ModuleNotFoundError) else None
    if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
        return (
            f"{text}. Python looks for it on sys.path (the folder the command runs in, PYTHONPATH, "
            "installed packages): run from the folder that holds it, add that folder to PYTHONPATH, "
            "or install its package"
        )
    if missing:
        return f"{text} (imported by {module_name!r}: install {missing!r})"
    return text


# Not a DatasetKindSpec: it knows neither length nor keys (the hooks' defaults), and a second base
# would merge its model_config into TargetSpec's, which lets the target's own arguments through.
class TargetDatasetSpec(TargetSpec):
    """Any dataset class, the Hydra way: ``_target_: my.module.MyDataset`` plus its arguments."""


class TargetCollateSpec(TargetSpec):
    """A collate function of yours: ``{_target_: my.module.collate, _partial_: true}`` for a function."""


class TargetTransformSpec(TargetSpec):
    """A transform of yours: a callable ``f(item)`` or ``f(item, generator)``, built by ``_target_``."""


class SamplerTargetSpec(TargetSpec):
    """A sampler or batch sampler class, the Hydra way: ``_target_: my.module.MySampler`` plus arguments.

    If the class takes a ``data_source`` or ``dataset`` argument that the config leaves out, the
    builder passes the dataset.
    """


class CallableTargetSpec(TargetSpec):
    """A function of yours, the Hydra way: ``{_target_: my.module.fn, _partial_: true}``."""
