"""JSON Schema of loaderfactory's YAML files, built from the registry, for editors and checks.

One document, three entry points:

- the schema itself: the command's root config (``cli.yaml``) and composed configs;
- ``#/$defs/<slot>``: a preset file of that slot's config group (``loader/torch_workers.yaml``);
- ``#/$defs/<table>_config``: one config node (``loader: {kind: torch, ...}``).

``kind`` picks the spec with ``if``/``then``, never ``oneOf``: a wrong value is reported at its
field ("-1 is less than the minimum of 0"), not as "valid under none of the kinds". Any value may
be an OmegaConf interpolation or ``???``. What JSON Schema cannot say (rules across fields, an
importable ``_target_``) is listed in the description of the kind it belongs to, generated from
the docstrings of the spec's validators.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Annotated, Any, get_args, get_origin

from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo

from loaderfactory.config import registry
from loaderfactory.config.schema_rewrite import (
    INTERPOLATION,
    INTERPOLATION_DEF,
    allow_interpolation,
    merge_unions,
    replace_any,
    same,
)
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.pack import PackSpec
from loaderfactory.config.specs.pipeline import HYDRA_KEYS, LoaderSpec, RunSpec
from loaderfactory.config.specs.refs import KindOf, spec_class_for
from loaderfactory.config.specs.resume import ResumeSpec
from loaderfactory.config.specs.target import HYDRA_TARGET_KEYS, TargetSpec

Kinds = dict[str, type[Spec]]
Tables = dict[registry.Table, tuple[Kinds, type[Spec] | None]]
"""Each table's kinds by name and the spec of its ``_target_`` nodes, if it takes them."""

DEFAULTS_LIST = {
    "description": "Hydra's defaults list: the configs merged before this file's own values "
    "(or after, where `_self_` is not last).",
    "type": "array",
    "items": {
        "type": ["string", "object"],
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": {"type": ["string", "null", "array"], "items": {"type": "string"}},
    },
}
_CONVERT = "|".join(
    "".join(f"[{c.lower()}{c.upper()}]" for c in mode) for mode in ("none", "partial", "object", "all")
)
_HYDRA_KEY_SCHEMAS: dict[str, dict[str, Any]] = {
    "_target_": {"type": "string", "description": "Dotted path of what hydra.utils.instantiate calls."},
    "_args_": {"type": "array", "description": "Positional arguments of the `_target_`."},
    "_recursive_": {"type": "boolean", "description": "Instantiate nested `_target_` nodes first."},
    "_partial_": {"type": "boolean", "description": "Return a functools.partial instead of calling it."},
    "_convert_": {
        "type": "string",
        "pattern": f"^({_CONVERT})$",
        "examples": ["none", "partial", "object", "all"],
        "description": "What OmegaConf nodes passed to the `_target_` become.",
    },
}

_ROOT_DESCRIPTION = (
    "A loaderfactory config: the command's root config (cli.yaml) or a composed one. Preset files of a "
    "slot's config group use #/$defs/<slot> (loader/*.yaml: loaderfactory.schema.json#/$defs/loader). "
    "Any value may be an OmegaConf interpolation ${...} or ??? (mandatory). Besides the rules below and "
    "in each kind's description, the schema cannot tell 4.0 from 4 (the library wants 4), see YAML's "
    ".inf and .nan (refused), check that a size string comes to at least 1 byte, or require a dataset "
    "(build_loader may get one as an object); `loaderfactory run.mode=validate` checks all of it."
)


def json_schema() -> dict[str, Any]:
    """The schema of root configs, with ``$defs`` for preset files and config nodes (see the module)."""
    tables: Tables = {table: _kinds(table) for table in registry.TABLES}
    defs: dict[str, Any] = {INTERPOLATION_DEF: INTERPOLATION, "defaults_list": DEFAULTS_LIST}
    for model in _models([s for kinds, target in tables.values() for s in [*kinds.values(), target] if s]):
        defs[model.__name__] = _model_schema(model, tables)
    for table, (kinds, target) in tables.items():
        if kinds or target:
            defs[f"{table}_config"] = _node(table, kinds, target, defs, preset=False)
            if table in registry.SLOTS:
                defs[table] = _node(table, kinds, target, defs, preset=True)
        registered = [registry.lookup(table, kind).spec.__name__ for kind in registry.available(table)]
        if registered:
            defs[f"{table}_kinds"] = {
                "description": f"The {table} kinds as a plain union, for schemas that refer to it; "
                f"#/$defs/{table}_config says which field is wrong.",
                "oneOf": [{"$ref": f"#/$defs/{name}"} for name in registered],
            }
    root = _model_schema(LoaderSpec, tables)
    hydra_keys = allow_interpolation({"properties": {key: _HYDRA_KEY_SCHEMAS[key] for key in HYDRA_KEYS}})
    root["properties"].update(hydra_keys["properties"])
    # Keys of a file, not of the config (composing removes them), so `properties` stays what
    # `validate` takes; `propertyNames` rather than `additionalProperties` names them all in the error.
    root["patternProperties"] = {
        "^defaults$": {"$ref": "#/$defs/defaults_list"},
        "^hydra$": {"type": "object", "description": "Hydra's own settings; not checked here."},
    }
    del root["additionalProperties"]
    root["propertyNames"] = {"enum": [*root["properties"], "defaults", "hydra"]}
    root["description"] = f"{_ROOT_DESCRIPTION}\n\nRules the schema cannot check: {_rules(LoaderSpec)}."
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "loaderfactory config",
        **{key: value for key, value in root.items() if key != "title"},
        "$defs": defs,
    }


def _kinds(table: registry.Table) -> tuple[Kinds, type[Spec] | None]:
    """The table's kinds by name, and the spec of its ``_target_`` nodes (``None`` if it takes none)."""
    try:
        target: type[Spec] | None = spec_class_for(table, {"_target_": ""})
    except ValidationError:
        target = None
    kinds = {kind: registry.lookup(table, kind).spec for kind in registry.available(table)}
    return {kind: spec for kind, spec in kinds.items() if spec is not target}, target


def _models(specs: list[type[Spec]]) -> list[type[Spec]]:
    """``specs``, the run and resume sections and the models their fields nest (``FieldSpec``), each once."""
    found: dict[str, type[Spec]] = {}

    def visit(annotation: Any) -> Iterator[type[Spec]]:
        if isinstance(annotation, type) and issubclass(annotation, Spec):
            yield annotation
        elif get_origin(annotation) is Annotated:
            if not any(isinstance(meta, KindOf) for meta in get_args(annotation)[1:]):
                yield from visit(get_args(annotation)[0])
        else:
            for arg in get_args(annotation):
                yield from visit(arg)

    pending: list[type[Spec]] = [*specs, RunSpec, ResumeSpec, PackSpec]
    while pending:
        model = pending.pop(0)
        if model.__name__ not in found:
            found[model.__name__] = model
            pending += [m for f in model.model_fields.values() if not _table(f) for m in visit(f.annotation)]
    return list(found.values())


def _table(field: FieldInfo) -> registry.Table | None:
    """The registry table a field's config nodes come from (``collate: {kind: dict}``), if any."""

    def find(annotation: Any, metadata: tuple[Any, ...] = ()) -> registry.Table | None:
        for meta in metadata:
            if isinstance(meta, KindOf):
                return meta.table
        if get_origin(annotation) is Annotated:
            return find(get_args(annotation)[0], get_args(annotation)[1:])
        return next((t for arg in get_args(annotation) if (t := find(arg))), None)

    return find(field.annotation, tuple(field.metadata))


def _model_schema(model: type[Spec], tables: Tables) -> dict[str, Any]:
    """The model's own schema: node fields refer to their table, aliases and interpolations are valid."""
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    schema.pop("$defs", None)
    properties = schema.setdefault("properties", {})
    excluded: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        table = _table(field)
        if table:
            kinds, target = tables[table]
            node = {"$ref": f"#/$defs/{table}_config"} if kinds or target else {"type": "null"}
            properties[key] = replace_any(properties[key], node)
            properties[key].setdefault("description", f"A {table} config; `kind` picks one of its kinds.")
        properties[key] = {k: v for k, v in merge_unions(properties[key]).items() if k != "title"}
        choices = field.validation_alias
        aliases = [a for a in choices.choices if a != key] if isinstance(choices, AliasChoices) else []
        for alias in aliases:
            note = f"The seeds' name for `{key}` (give one of the two). "
            properties[str(alias)] = _seed_values(
                str(alias), {**properties[key], "description": note + properties[key].get("description", "")}
            )
            excluded.setdefault(key, {"properties": {}})["properties"][str(alias)] = False
    if issubclass(model, TargetSpec):  # what hydra.utils.instantiate reads besides the arguments
        properties |= {key: _HYDRA_KEY_SCHEMAS[key] for key in HYDRA_TARGET_KEYS}
    for alias, key in model.value_aliases.items():
        note = f"The seeds' name for `{key}`, its value translated (give one of the two)."
        properties[alias] = _seed_values(alias, {"description": note})
        excluded.setdefault(key, {"properties": {}})["properties"][alias] = False
    if excluded:
        schema["dependentSchemas"] = excluded
    if "kind" in properties:
        schema["required"] = sorted({*schema.get("required", []), "kind"})
    rules = _rules(model)
    if rules:
        schema["description"] = f"{schema.get('description', '')}\n\nRules the schema cannot check: {rules}."
    done: dict[str, Any] = allow_interpolation(schema)
    return done


def _seed_values(alias: str, schema: dict[str, Any]) -> dict[str, Any]:
    """What a seed's name read by a kind's own ``before`` validator accepts, unlike its field."""
    if alias == "ram_use":  # QueueDatasetSpec._ram_use_in_mb: torchvtk's ram_use above 1 is MB
        return {key: value for key, value in schema.items() if key != "maximum"}
    if alias == "thread_pool":  # ShardedLoaderSpec._thread_pool_alias: true/false
        return {**schema, "type": "boolean"}
    return schema


def _rules(model: type[Spec]) -> str:
    """The model's validators, one line each: what only ``validate`` checks."""
    decorators = model.__pydantic_decorators__
    fields = {name: field.alias or name for name, field in model.model_fields.items()} | {"*": "every field"}
    rules = [
        ", ".join(f"`{fields.get(f, f)}`" for f in d.info.fields) + f": {_summary(d.func)}"
        for d in decorators.field_validators.values()
    ]
    rules += [_summary(d.func) for d in decorators.model_validators.values() if d.info.mode == "after"]
    return "; ".join(rules)


def _summary(func: Callable[..., Any]) -> str:
    """A validator's docstring's first paragraph, or its name where it has none."""
    doc = inspect.getdoc(func)
    text = " ".join(doc.split("\n\n")[0].split()) if doc else func.__name__.strip("_").replace("_", " ")
    text = text.replace("``", "`").rstrip(".")
    return text[:1].lower() + text[1:]  # one of a list joined by "; "


def _node(
    table: str, kinds: Kinds, target: type[Spec] | None, defs: dict[str, Any], *, preset: bool
) -> dict[str, Any]:
    """A config node of ``table`` (``preset``: a preset file, which may extend another by ``defaults``)."""
    names = sorted(kinds)
    picks = f"`kind` picks one of: {', '.join(names)}" + (", or `_target_` names a class" if target else "")
    known: list[dict[str, Any]] = [{"properties": {"kind": {"enum": names}}, "required": ["kind"]}]
    clauses = [
        {
            "if": {"properties": {"kind": {"const": k}}, "required": ["kind"]},
            "then": _variant(kinds[k], defs, preset),
        }
        for k in names
    ]
    node: dict[str, Any] = {
        "type": "object",
        "properties": allow_interpolation({"properties": {"kind": {"description": picks, "enum": names}}})[
            "properties"
        ],
    }
    if target:
        clauses.append({"if": {"required": ["_target_"]}, "then": _variant(target, defs, preset)})
        known.append({"required": ["_target_"]})
        node["dependentSchemas"] = {"_target_": {"properties": {"kind": False}}}
    clauses.append({"if": {"not": {"anyOf": known}}, "then": _any_kind(kinds, target, defs, preset)})
    required: dict[str, Any] = {"required": ["kind"]}
    if target:
        required = {"if": {"not": {"required": ["_target_"]}}, "then": required}
    if preset:
        required = {"if": {"not": {"required": ["defaults"]}}, "then": required}
    node["allOf"] = [*clauses, required]
    if preset:
        node["description"] = (
            f"A preset file of the {table} config group: a {table} config; {picks}. One that extends "
            "another through its `defaults` list may leave out what that one sets, `kind` too "
            "(its fields are then checked against every kind's)."
        )
    else:
        node["description"] = f"A {table} config: {picks}; the kind's fields follow."
    return node


def _variant(spec: type[Spec], defs: dict[str, Any], preset: bool) -> dict[str, Any]:
    """``spec``'s schema; in a preset with a ``defaults`` list, every field optional."""
    ref = {"$ref": f"#/$defs/{spec.__name__}"}
    if not preset:
        return ref
    schema = defs[spec.__name__]
    partial = {
        "properties": {key: _pointer(spec.__name__, key) for key in schema["properties"]}
        | {"defaults": {"$ref": "#/$defs/defaults_list"}},
        "additionalProperties": schema.get("additionalProperties", True),
    }
    if "dependentSchemas" in schema:
        partial["dependentSchemas"] = schema["dependentSchemas"]
    return {"if": {"required": ["defaults"]}, "then": partial, "else": ref}


def _any_kind(kinds: Kinds, target: type[Spec] | None, defs: dict[str, Any], preset: bool) -> dict[str, Any]:
    """The fields of every kind, for a node whose kind the schema cannot see (inherited, interpolated)."""
    owners: dict[str, list[str]] = {}
    for spec in kinds.values():
        for key, schema in defs[spec.__name__]["properties"].items():
            names = owners.setdefault(key, [])
            if not any(same(defs[other]["properties"][key], schema) for other in names):
                names.append(spec.__name__)
    owners.pop("kind", None)
    properties: dict[str, Any] = {
        key: _pointer(names[0], key) if len(names) == 1 else {"anyOf": [_pointer(n, key) for n in names]}
        for key, names in owners.items()
    }
    properties["kind"] = True  # the node checks it; a kind the schema does not know gets here
    if preset:
        properties["defaults"] = {"$ref": "#/$defs/defaults_list"}
    # A `_target_` node's arguments are its class's: with one possible, any key may be right.
    return {"properties": properties} | ({} if target else {"additionalProperties": False})


def _pointer(model: str, key: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{model}/properties/{key}"}
