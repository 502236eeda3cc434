"""Rewrites of pydantic's JSON Schema so that editors and validators report one precise problem.

Generic JSON Schema (Draft 2020-12) transformations; :mod:`loaderfactory.config.schema` applies
them to the specs' schemas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

INTERPOLATION_DEF = "interpolation"
"""The name of :data:`INTERPOLATION` in the document's ``$defs``."""
INTERPOLATION = {
    "description": "An OmegaConf interpolation, resolved when the config is composed, or ??? (a value "
    "to set before use). Any value may be one.",
    "type": "string",
    "pattern": r"^(\$\{.*\}|\?\?\?)$",
}
ANNOTATIONS = ("title", "description", "default", "examples", "deprecated")
_BY_TYPE = {
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "string": {"pattern", "minLength", "maxLength", "format"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"},
    "object": {"properties", "additionalProperties", "required", "minProperties", "maxProperties"},
    "boolean": set(),
    "null": set(),
}
"""Keywords that apply to one JSON type only, so branches of other types can share a schema."""
_BY_TYPE["integer"] = _BY_TYPE["number"]


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal but for descriptions and defaults."""

    def bare(schema: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in schema.items() if k not in ANNOTATIONS}, sort_keys=True)

    return bare(a) == bare(b)


def subschemas(schema: Any, change: Callable[[Any], Any], keys: tuple[str, ...] | None = None) -> Any:
    """``schema`` with ``change`` applied to each direct subschema (under ``keys`` only, if given)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key, value in schema.items():
        if keys is not None and key not in keys:
            continue
        if key in ("properties", "patternProperties", "dependentSchemas"):
            out[key] = {name: change(sub) for name, sub in value.items()}
        elif key in ("anyOf", "allOf", "oneOf", "prefixItems"):
            out[key] = [change(sub) for sub in value]
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
            out[key] = change(value)
    return out


def replace_any(schema: Any, node: dict[str, Any]) -> Any:
    """``schema`` with each subschema that allows anything (pydantic's ``Any``) replaced by ``node``."""
    if isinstance(schema, dict) and set(schema) <= set(ANNOTATIONS):
        return {**schema, **node}
    return subschemas(schema, lambda sub: replace_any(sub, node))


def merge_unions(schema: Any) -> Any:
    """Unions of distinct JSON types as one schema, so a wrong value gets one precise error."""
    schema = subschemas(schema, merge_unions)
    if not isinstance(schema, dict) or "anyOf" not in schema:
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    merged = _merge(schema["anyOf"])
    if set(merged) & set(rest):
        return schema
    return rest | merged


def _types(branch: Any) -> list[str] | None:
    """The JSON types a union's branch takes, if it says."""
    if not isinstance(branch, dict):
        return None
    if "type" in branch:
        return [branch["type"]] if isinstance(branch["type"], str) else list(branch["type"])
    return ["object"] if "$ref" in branch else None  # every $ref here names an object


def _merge(branches: list[Any]) -> dict[str, Any]:
    """``anyOf: branches`` as one schema where each branch takes its own JSON types, else as it was."""
    unique = list({json.dumps(b, sort_keys=True): b for b in branches}.values())
    typed = [(types, branch) for branch in unique if (types := _types(branch)) is not None]
    flat = [t for types, _ in typed for t in types]
    numbers = sum(t in ("number", "integer") for t in flat)
    if len(unique) == 1:
        return dict(unique[0])
    if len(typed) < len(unique) or len(set(flat)) < len(flat) or numbers > 1:
        return {"anyOf": unique}
    others = [branch for branch in unique if branch != {"type": "null"}]
    if len(unique) == 2 and len(others) == 1 and set(others[0]) == {"type", "enum"}:
        return {"type": flat, "enum": [*others[0]["enum"], None]}  # editors still complete the enum
    merged: dict[str, Any] = {"type": flat}
    conditions = []
    for types, branch in typed:
        rest = {key: value for key, value in branch.items() if key != "type"}
        if set(rest) <= set().union(*(_BY_TYPE[t] for t in types)) and not set(rest) & set(merged):
            merged |= rest
        elif rest:
            conditions.append({"if": {"type": types[0] if len(types) == 1 else types}, "then": rest})
    if len(conditions) == 1:
        merged |= conditions[0]
    elif conditions:
        merged["allOf"] = conditions
    return merged


def allow_interpolation(schema: Any, value: bool = False) -> Any:
    """``schema`` where every value (a property, an item) may also be ``${...}`` or ``???``.

    ``if``/``else`` rather than ``anyOf``: a value that is no interpolation gets the errors of its
    own schema, not "valid under none of two".
    """
    values = ("properties", "patternProperties", "items", "additionalProperties", "prefixItems")
    schema = subschemas(schema, lambda sub: allow_interpolation(sub, value=True), values)
    schema = subschemas(schema, allow_interpolation, ("anyOf", "allOf", "oneOf", "then", "else"))
    if not value or not isinstance(schema, dict):
        return schema
    notes = {key: schema[key] for key in ANNOTATIONS if key in schema}
    checks = {key: v for key, v in schema.items() if key not in ANNOTATIONS}
    if not checks:
        return schema
    return notes | {"if": {"$ref": f"#/$defs/{INTERPOLATION_DEF}"}, "then": True, "else": checks}
