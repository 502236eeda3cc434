"""JSON Schema of loader configs, built from the registry, for editor completion of YAML files."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices

from loaderfactory.config import registry
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.pipeline import HYDRA_KEYS, LoaderSpec, RunSpec


def json_schema() -> dict[str, Any]:
    """A JSON Schema where each slot is one of its registered kinds' specs, chosen by ``kind``."""
    definitions: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    for table in registry.TABLES:
        options = []
        for kind in registry.available(table):
            spec = registry.lookup(table, kind).spec
            schema = spec.model_json_schema(ref_template="#/$defs/{model}")
            definitions.update(schema.pop("$defs", {}))
            definitions[spec.__name__] = _with_aliases_and_kind(spec, schema)
            options.append({"$ref": f"#/$defs/{spec.__name__}"})
        if not options:  # nothing registered in this table: only null is valid
            if table in registry.SLOTS:
                properties[table] = {"type": "null"}
            continue
        definitions[f"{table}_kinds"] = {"oneOf": options}
        if table in registry.SLOTS:
            optional = LoaderSpec.model_fields[table].default is None
            ref = {"$ref": f"#/$defs/{table}_kinds"}
            properties[table] = {"anyOf": [ref, {"type": "null"}]} if optional else ref
    run = RunSpec.model_json_schema(ref_template="#/$defs/{model}")
    definitions.update(run.pop("$defs", {}))
    properties["run"] = run
    properties["seed"] = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}
    for key in HYDRA_KEYS:  # what hydra.utils.instantiate reads on the root node
        properties[key] = {"type": ["string", "boolean"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "loaderfactory config",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "$defs": definitions,
    }


def _with_aliases_and_kind(spec: type[Spec], schema: dict[str, Any]) -> dict[str, Any]:
    """The seeds' names are valid keys too, and ``kind`` is what picks the spec, so it is required."""
    properties = schema.get("properties", {})
    for name, field in spec.model_fields.items():
        choices = field.validation_alias
        if isinstance(choices, AliasChoices) and name in properties:
            for alias in choices.choices:
                if isinstance(alias, str) and alias != name:
                    properties.setdefault(alias, properties[name])
    if "kind" in properties:
        schema["required"] = sorted({*schema.get("required", []), "kind"})
    return schema
