"""Fields whose spec is chosen at validation time by ``kind`` from a registry table.

``prefetch: {kind: thread, buffer_size: 4}`` is validated by whatever spec class ``thread`` is
registered with, so kinds that users register validate exactly like built-ins.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ValidationError, ValidationInfo, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails, PydanticCustomError

from loaderfactory.config import registry
from loaderfactory.config.specs.base import RULE, Spec
from loaderfactory.config.specs.target import TargetCollateSpec, TargetDatasetSpec, TargetTransformSpec

_TARGET_SPECS: dict[registry.Table, type[Spec]] = {
    "dataset": TargetDatasetSpec,
    "collate": TargetCollateSpec,
    "transform": TargetTransformSpec,
}
"""The tables whose entries may name a class or function by ``_target_``, and the spec of such an entry."""


def _fail(title: str, loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> ValidationError:
    error = PydanticCustomError(kind, message)
    details: list[InitErrorDetails] = [{"type": error, "loc": loc, "input": value}]
    return ValidationError.from_exception_data(title, details)


def _target_spec(table: registry.Table) -> type[Spec] | None:
    """The spec of a ``_target_`` node in ``table``, where the table takes one."""
    return _TARGET_SPECS.get(table)


def spec_class_for(table: registry.Table, value: dict[str, Any], root: str = "") -> type[Spec]:
    """The spec class ``value`` asks for; raises ``ValidationError`` located at ``kind``.

    ``root`` is the path of the loader config inside the user's config (``data.``), for hints.
    """
    registry.load_plugins()
    target_spec = _target_spec(table)
    if target_spec is not None and "_target_" in value and "kind" in value:
        message = "give either 'kind' or '_target_', not both"
        if table == "dataset":
            message += f" (on the command line: ~{root}dataset +{root}dataset._target_=...)"
        raise _fail(table, ("_target_",), RULE, message, value["_target_"])
    if target_spec is not None and "_target_" in value:
        return target_spec
    if "kind" not in value:
        known = ", ".join(registry.available(table))
        raise _fail(table, ("kind",), RULE, f"missing; choose one of: {known}", value)
    kind = value["kind"]
    try:
        return registry.lookup(table, str(kind)).spec
    except LookupError:
        raise
    except ValueError:
        message = registry.unknown_kind_message(table, kind)
        raise _fail(table, ("kind",), RULE, message, kind) from None


class KindOf:
    """Marks a field whose spec is chosen by ``kind`` from registry table ``table``."""

    def __init__(self, table: registry.Table) -> None:
        self.table = table

    def __repr__(self) -> str:
        return f"KindOf({self.table!r})"


def dispatch_on_kind(table: registry.Table) -> WrapValidator:
    """A validator that validates a mapping with the spec class registered for its ``kind``."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Spec:
        if isinstance(value, Spec):
            return value
        if not isinstance(value, dict):
            raise PydanticCustomError(RULE, f"must be a mapping with a 'kind' key, got {value!r}")
        root = (info.context or {}).get("root", "")
        spec_cls = spec_class_for(table, value, f"{root}." if root else "")
        data = dict(value)
        if "kind" not in spec_cls.model_fields:
            data.pop("kind", None)
        return spec_cls.model_validate(data, context=info.context)

    return WrapValidator(validate)


DatasetRef = Annotated[Any, dispatch_on_kind("dataset"), KindOf("dataset")]
QueueRef = Annotated[Any, dispatch_on_kind("queue"), KindOf("queue")]
LoaderRef = Annotated[Any, dispatch_on_kind("loader"), KindOf("loader")]
StreamRef = Annotated[Any, dispatch_on_kind("stream"), KindOf("stream")]
PrefetchRef = Annotated[Any, dispatch_on_kind("prefetch"), KindOf("prefetch")]
TransformRef = Annotated[Any, dispatch_on_kind("transform"), KindOf("transform")]
"""A transform entry: ``{kind: rand_flip, apply_on: [vol], p: 0.5}`` or ``{_target_: my.Transform}``."""
Transforms = TransformRef | list[TransformRef] | None
"""One transform, or a list applied in order (a ``compose`` without the wrapper)."""
CollateRef = Annotated[Any, dispatch_on_kind("collate"), KindOf("collate")]
"""A collate entry: ``{kind: dict, keys: [vol, label]}`` or ``{_target_: my.collate, _partial_: true}``."""
