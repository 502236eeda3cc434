"""The JSON Schema (``run.mode=schema``) accepts every shipped file and config, and agrees with the specs."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Annotated, Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from jsonschema import Draft202012Validator
from omegaconf import OmegaConf
from pydantic import AliasChoices, ConfigDict, PydanticUserError, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

import loaderfactory
from loaderfactory.config import registry
from loaderfactory.config.schema import json_schema
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = CONF / "loaderfactory"
SCHEMA = json_schema()
ROOT = Draft202012Validator(SCHEMA)


def checker(pointer: str) -> Draft202012Validator:
    """A validator for the part of the schema at ``pointer``, as an editor pointed at it uses it."""
    if pointer == "#":
        return ROOT
    root = {key: value for key, value in SCHEMA.items() if key != "$defs"}
    defs = SCHEMA["$defs"] | {"root": root}
    part: Any = {"$defs": defs}
    for name in pointer.replace("#/properties/", "#/$defs/root/properties/")[2:].split("/"):
        part = part[name]
    # The part itself as the document, beside the definitions its references name: what a "$ref" to
    # it checks, without resolving that reference on every value (a third of the module's time).
    return Draft202012Validator({"$schema": SCHEMA["$schema"], "$defs": defs, **part})


def problems(validator: Draft202012Validator, data: Any) -> list[tuple[str, str]]:
    return [(".".join(str(p) for p in e.absolute_path), e.message) for e in validator.iter_errors(data)]


def test_the_schema_is_valid_draft_2020_12() -> None:
    """Editors and validators can load it: the schema itself is valid Draft 2020-12."""
    Draft202012Validator.check_schema(SCHEMA)


# --- every shipped file, every composed config ---------------------------------------------------


def schema_of(path: Path) -> str | None:
    """Which schema a file under ``conf/`` follows: the root, a slot's preset, or none of ours."""
    parts = path.relative_to(GROUPS).parts
    if parts == ("cli.yaml",):
        return "#"
    if parts[0] in registry.SLOTS and len(parts) == 2:
        return f"#/$defs/{parts[0]}"
    if parts[0] == "hydra":
        return None  # Hydra's own config groups (hydra/help): Hydra reads them, not loaderfactory
    raise AssertionError(f"{path}: no schema says what this file holds; map it in schema_of")


YAML_FILES = sorted(CONF.rglob("*.yaml"))
CHECKED = [path for path in YAML_FILES if schema_of(path)]


def test_every_yaml_file_under_conf_has_a_schema_or_is_hydras_own() -> None:
    """Each shipped YAML file is checked below, except Hydra's own settings."""
    assert {schema_of(path) for path in CHECKED} == {"#", *(f"#/$defs/{slot}" for slot in registry.SLOTS)}
    assert all(path.relative_to(GROUPS).parts[0] == "hydra" for path in set(YAML_FILES) - set(CHECKED))


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(GROUPS)))
def test_every_shipped_yaml_file_validates(path: Path) -> None:
    """cli.yaml against the schema, each preset against its slot's: defaults lists, ``${...}`` and ``???``."""
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    definition = schema_of(path)
    assert definition is not None
    assert problems(checker(definition), data) == []


PRESETS = [(slot, p.stem) for slot in registry.SLOTS for p in sorted((GROUPS / slot).glob("*.yaml"))]


@pytest.mark.parametrize(("slot", "preset"), PRESETS, ids=[f"{s}={p}" for s, p in PRESETS])
def test_every_config_composed_from_a_preset_validates(slot: str, preset: str) -> None:
    """What ``loaderfactory slot=preset`` composes validates, with interpolations resolved or not."""
    config = loaderfactory.compose([f"{slot}={preset}"])
    for resolve in (False, True):
        assert problems(ROOT, OmegaConf.to_container(config, resolve=resolve)) == [], resolve


# --- wrong values, one precise error each ---------------------------------------------------------

WRONG = [
    ({"loader": {"kind": "torch", "num_workers": -1}}, "loader.num_workers", "less than the minimum of 0"),
    ({"loader": {"kind": "sharded", "num_workers": 2000}}, "loader.num_workers", "greater than the maximum"),
    ({"loader": {"kind": "torc"}}, "loader.kind", f"'torc' is not one of {registry.available('loader')}"),
    ({"loader": {"kind": "torch", "num_worker": 1}}, "loader", "('num_worker' was unexpected)"),
    ({"loader": {"batch_size": 4}}, "loader", "'kind' is a required property"),
    ({"loader": {"kind": "torch", "timeout": 0}}, "loader.timeout", "less than or equal to the minimum of 0"),
    (
        {"loader": {"kind": "torch", "multiprocessing_context": "fork2"}},
        "loader.multiprocessing_context",
        "'fork2'",
    ),
    ({"loader": {"kind": "torch", "distributed": "on"}}, "loader.distributed", "not one of ['auto', 'off']"),
    (
        {"loader": {"kind": "torch", "distributed": {"rank": 0}}},
        "loader.distributed",
        "'world_size' is a required",
    ),
    (
        {"loader": {"kind": "torch", "collate": {"kind": "dict", "keys": "vol"}}},
        "loader.collate.keys",
        "type",
    ),
    ({"loader": {"kind": "torch", "bs": 4, "batch_size": 4}}, "loader", "False schema does not allow 4"),
    ({"dataset": {"kind": "tensor_folder"}}, "dataset", "'root' is a required property"),
    ({"dataset": {"kind": "synthetic", "length": 0}}, "dataset.length", "less than the minimum of 1"),
    ({"dataset": {"kind": "synthetic", "fields": {"x": {"dtype": "f8"}}}}, "dataset.fields.x.dtype", "'f8'"),
    ({"queue": {"kind": "ram", "ram_budget": 2}}, "queue.ram_budget", "greater than the maximum of 1"),
    (
        {"queue": {"kind": "ram", "sample_transforms": [{"kind": "rand_flip", "p": 2}]}},
        "queue.sample_transforms.0.p",
        "maximum",
    ),
    (
        {"queue": {"kind": "ram", "collate": {"kind": "ring", "ring_size": 1}}},
        "queue.collate.ring_size",
        "minimum of 2",
    ),
    ({"stream": {"kind": "epochs", "epoch_size": -2}}, "stream.epoch_size", "less than the minimum of -1"),
    (
        {"prefetch": {"kind": "thread", "buffer_size": "4"}},
        "prefetch.buffer_size",
        "'4' is not of type 'integer'",
    ),
    (
        {"prefetch": {"kind": "thread", "buffer_size": "${x"}},
        "prefetch.buffer_size",
        "is not of type 'integer'",
    ),
    ({"run": {"mode": "go"}}, "run.mode", "'go' is not one of"),
    ({"seed": -1}, "seed", "less than the minimum of 0"),
    ({"_recursive_": "no"}, "_recursive_", "is not of type 'boolean'"),
    ({"bogus": 1}, "", "'bogus' is not one of ['dataset', 'queue', 'loader'"),
    ({"defaults": "synthetic"}, "defaults", "is not of type 'array'"),
]


@pytest.mark.parametrize(("config", "where", "message"), WRONG, ids=[w for _, w, _ in WRONG])
def test_a_wrong_value_gets_one_error_at_its_field(config: dict[str, Any], where: str, message: str) -> None:
    """The kind picks the spec: a mistake is one error at its field, not "valid under none of the kinds"."""
    found = problems(ROOT, config)
    assert len(found) == 1, found
    assert found[0][0] == where
    assert message in found[0][1]


PRESET_MISTAKES = [
    ("loader", {"defaults": ["torch", "_self_"], "num_worker": 2}, "", "('num_worker' was unexpected)"),
    ("loader", {"defaults": ["torch", "_self_"], "num_workers": -2}, "num_workers", "minimum of 0"),
    ("loader", {"batch_size": 3}, "", "'kind' is a required property"),
    ("loader", {"kind": "torch", "defaults": ["torch"], "pin_memory": "yes"}, "pin_memory", "'boolean'"),
    ("dataset", {"defaults": ["synthetic"], "length": 0}, "length", "minimum of 1"),
    ("dataset", {"kind": "tensor_folder", "pattern": "*.npy"}, "", "'root' is a required property"),
    ("queue", {"defaults": [{"ram": None}], "mode": "sometimes"}, "mode", "'sometimes' is not one of"),
]


@pytest.mark.parametrize(("slot", "preset", "where", "message"), PRESET_MISTAKES)
def test_a_preset_with_a_mistake_gets_one_error(
    slot: str, preset: dict[str, Any], where: str, message: str
) -> None:
    """A preset file is checked like a config node; one extending another may leave out what it sets."""
    found = problems(checker(f"#/$defs/{slot}"), preset)
    assert len(found) == 1, found
    assert found[0][0] == where
    assert message in found[0][1]


@pytest.mark.parametrize("value", ["${oc.select:..queue.batch_size,32}", "${seed}", "???"])
def test_interpolations_and_mandatory_values_are_accepted_for_every_value(value: str) -> None:
    """Every property of every spec, list items, map values and whole slots may be ``${...}`` or ``???``."""
    for name, definition in SCHEMA["$defs"].items():
        for key in definition.get("properties", {}):
            assert checker(f"#/$defs/{name}/properties/{key}").is_valid(value), (name, key)
    nested = {
        "dataset": {"kind": "synthetic", "fields": {"x": value, "y": {"shape": [value, 3]}}, "seed": value},
        "queue": {"kind": value, "sample_transforms": [value, {"kind": "rand_flip", "dims": [value]}]},
        "loader": value,
        "seed": value,
        "run": {"mode": value, "epochs": value},
    }
    assert problems(ROOT, nested) == []


# --- the schema and the specs agree ---------------------------------------------------------------


def spec_models() -> list[type[Spec]]:
    """Every model the schema describes: the kinds, what they nest, the run section and the root."""
    found: dict[str, type[Spec]] = {}
    pending: list[type[Spec]] = [Spec]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("loaderfactory.") and sub.__name__ in SCHEMA["$defs"]:
                found[sub.__name__] = sub
    return [LoaderSpec, *sorted(found.values(), key=lambda m: m.__name__)]


MODELS = spec_models()
NODES: list[Any] = [
    {"shape": [3, 4], "dtype": "uint8", "high": 5},
    {"image": {"shape": [3]}},
    {"image": {"shape": [0]}},
    {"image": {"dtype": "complex64"}},
    {"rank": 0, "world_size": 2},
    {"rank": -1, "world_size": 2},
    {"rank": 0, "world_size": 0},
    {"rank": 0},
    {"_target_": "collections.OrderedDict"},
    {"_target_": 3},
    {"kind": "dict", "keys": ["a"]},
    {"kind": "dict", "keys": "a"},
    {"kind": "ring", "ring_size": 1},
    {"kind": "nope"},
    {"kind": "rand_flip", "p": 0.5},
    {"kind": "rand_flip", "p": 2},
    {"kind": "compose", "transforms": []},
    [{"kind": "gaussian_noise"}],
    [{"kind": "gaussian_noise", "std": -1}],
    {"kind": "synthetic", "length": 3},
    {"kind": "tensor_folder"},
    {"kind": "torch"},
    {"kind": "thread", "buffer_size": 0},
    {"kind": "epochs"},
    {"kind": "ram"},
    {"mode": "validate"},
    {"mode": "nope"},
]
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 7, 2**63 - 1, 2**63, 0.5, -0.5, 1.5, 2.0, 1e-9,
    "", "x", "auto", "off", "thread", "2GiB", "512 mb", "0B", "1.5KB", "2 GB", "2GiBs", "-1MB",
    [], [1], [0], [-1, -2], [-1, -1], [0.5], ["a"], [[1]], {}, {"a": 1},
    *NODES,
]  # fmt: skip
ZERO_SIZES = {"0B"}
"""Size strings that come to less than a byte: the library refuses them, JSON Schema cannot see it."""


def bounds(field: FieldInfo, schema: Any) -> list[Any]:
    """Values at and beside every bound that either side states: the field's constraints, the schema's."""
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                    found.append(value)
                elif key in ("enum", "const"):
                    for v in value if key == "enum" else [value]:
                        found.extend([v, f"{v}x", v.upper()] if isinstance(v, str) else [v])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    for meta in field.metadata:
        for inner in getattr(meta, "metadata", [meta]):
            found += [
                getattr(inner, k) for k in ("ge", "gt", "le", "lt") if getattr(inner, k, None) is not None
            ]
    near = []
    for value in found:
        near.append(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            near += [value - 1, value + 1, value - 0.5, value + 0.5, [value], [value - 1]]
    return near


def whole(value: Any) -> Any:
    """``value`` with whole floats as ints, as JSON sees them."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [whole(item) for item in value]
    if isinstance(value, dict):
        return {key: whole(item) for key, item in value.items()}
    return value


def accepts(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def adapter_for(field: FieldInfo) -> TypeAdapter[Any]:
    """The field's type and constraints alone (no model validators), as strict as the specs."""
    annotated = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    try:
        return TypeAdapter(annotated, config=ConfigDict(strict=True))
    except PydanticUserError:  # a model type brings its own (strict) config
        return TypeAdapter(annotated)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_schema_and_spec_agree_on_every_fields_types_ranges_and_enums(model: type[Spec]) -> None:
    """For each field, values at every bound, of every type and of every enum get the same verdict."""
    name = "" if model is LoaderSpec else model.__name__
    disagree = []
    for field_name, field in model.model_fields.items():
        key = field.alias or field_name
        prop = f"#/properties/{key}" if not name else f"#/$defs/{name}/properties/{key}"
        schema = checker(prop)
        adapter = adapter_for(field)
        for value in [*VALUES, *bounds(field, schema.schema), field.default]:
            if isinstance(value, float) and not math.isfinite(value):
                continue  # YAML's .inf/.nan: JSON has neither
            # JSON Schema counts 4.0 as the integer 4, so it says what the library says of 4
            expected = accepts(adapter, value) or accepts(adapter, whole(value))
            sized = key in ("ram_budget", "limit", "shard_size", "shuffle_memory")
            if sized and isinstance(value, str) and value in ZERO_SIZES:
                expected = True
            if schema.is_valid(value) != expected:
                disagree.append((key, value, "library" if expected else "schema", "accepts"))
    assert disagree == []


def test_the_seeds_names_take_what_their_field_takes() -> None:
    """``bs`` is ``batch_size`` to the schema too; names whose value is translated have their own schema."""
    for model in MODELS:
        definition = SCHEMA if model is LoaderSpec else SCHEMA["$defs"][model.__name__]
        properties = definition["properties"]
        for field_name, field in model.model_fields.items():
            key = field.alias or field_name
            choices = field.validation_alias
            for alias in choices.choices if isinstance(choices, AliasChoices) else []:
                if alias != key and alias != "ram_use":
                    mine = {k: v for k, v in properties[alias].items() if k != "description"}
                    theirs = {k: v for k, v in properties[key].items() if k != "description"}
                    assert mine == theirs, (model.__name__, alias)


SEED_VALUES = [
    ("queue", {"kind": "ram", "ram_use": 0.5}, True),
    ("queue", {"kind": "ram", "ram_use": 512}, True),
    ("queue", {"kind": "ram", "ram_use": 1.5}, True),
    ("queue", {"kind": "ram", "ram_use": "2GiB"}, True),
    ("queue", {"kind": "ram", "ram_use": 0}, False),
    ("queue", {"kind": "ram", "ram_use": -1}, False),
    ("queue", {"kind": "ram", "ram_use": "lots"}, False),
    ("queue", {"kind": "ram", "ram_use": True}, False),
    ("queue", {"kind": "ram", "ram_use": 0.5, "ram_budget": 0.5}, False),
    ("loader", {"kind": "sharded", "batch_size": 4, "thread_pool": True}, True),
    ("loader", {"kind": "sharded", "batch_size": 4, "thread_pool": False}, True),
    ("loader", {"kind": "sharded", "batch_size": 4, "thread_pool": "yes"}, False),
    ("loader", {"kind": "sharded", "batch_size": 4, "thread_pool": 1}, False),
    ("loader", {"kind": "sharded", "batch_size": 4, "thread_pool": True, "worker_type": "thread"}, False),
    ("loader", {"kind": "torch", "bs": 8}, True),
    ("loader", {"kind": "torch", "collate_fn": {"kind": "dict"}}, True),
    ("loader", {"kind": "torch", "collate_fn": {"kind": "dict"}, "collate": None}, False),
]


@pytest.mark.parametrize(("slot", "node", "valid"), SEED_VALUES)
def test_the_seeds_names_get_the_verdict_of_validate(slot: str, node: dict[str, Any], valid: bool) -> None:
    """``ram_use`` above 1 is MB, ``thread_pool`` a bool, no name with its alias: as ``validate`` says."""
    config = {"dataset": {"kind": "synthetic"}, slot: node}
    assert ROOT.is_valid(config) is valid
    if valid:
        loaderfactory.validate(config)
    else:
        with pytest.raises(ConfigError):
            loaderfactory.validate(config)


def minimal(table: str, kind: str, folder: Path) -> dict[str, Any]:
    """A small valid config of a kind: what its contract sets, or the fewest fields it needs."""
    contracts = registry.lookup(table, kind).contracts  # type: ignore[arg-type]  # tables are tables
    if contracts:
        return {"kind": kind} | contract_fields(table, contracts[0].overrides(folder))
    required = {
        "compose": {"transforms": [{"kind": "rand_flip"}]},
        "random_crop": {"size": [4]},
        "to_dtype": {"dtype": "float32"},
        "tuple": {"keys": ["image", "label"]},
        "_target_": {"_target_": "collections.OrderedDict"},
    }
    return ({} if kind == "_target_" else {"kind": kind}) | required.get(kind, {})


def contract_fields(table: str, overrides: list[str]) -> dict[str, Any]:
    """``["loader.batch_size=4", "loader=sharded"]`` → ``{"batch_size": 4}``: the fields they set."""
    node: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.key_or_group.startswith(f"{table}."):
            *parents, name = override.key_or_group.split(".")[1:]
            place = node
            for parent in parents:
                place = place.setdefault(parent, {})
            place[name] = override.value()
    return node


def in_a_config(table: str, node: dict[str, Any]) -> dict[str, Any]:
    """A whole config holding ``node`` where its table's nodes go."""
    where = {"transform": ("queue", "sample_transforms"), "collate": ("loader", "collate")}
    config: dict[str, Any] = {"dataset": {"kind": "synthetic"}}
    if table in where:
        slot, key = where[table]
        config[slot] = {"kind": "ram" if slot == "queue" else "torch", key: node}
    else:
        config[table] = node
    return config


KINDS = [(t, k) for t in registry.TABLES for k in registry.available(t)]


@pytest.mark.parametrize(("table", "kind"), KINDS, ids=[f"{t}:{k}" for t, k in KINDS])
def test_every_kind_gets_the_verdict_of_validate(table: str, kind: str, tmp_path: Path) -> None:
    """A kind's smallest config passes both; an unknown field, an unknown kind fail both."""
    node = minimal(table, kind, tmp_path)
    wrong = [node | {"bogus_field": 1}, node | {"kind": "no_such_kind"}]
    if kind == "_target_":  # its arguments are its class's; only kind and _target_ together are wrong
        wrong = [node | {"kind": "synthetic"}]
    loaderfactory.validate(in_a_config(table, node))
    assert problems(ROOT, in_a_config(table, node)) == []
    for config in map(lambda n: in_a_config(table, n), wrong):
        with pytest.raises(ConfigError):
            loaderfactory.validate(config)
        assert problems(ROOT, config), config


# --- what the schema cannot check, it says ---------------------------------------------------------

ACROSS_FIELDS = [
    ("TorchLoaderSpec", {"loader": {"kind": "torch", "prefetch_factor": 2}}, "need num_workers >= 1"),
    (
        "TorchLoaderSpec",
        {
            "loader": {
                "kind": "torch",
                "batch_size": 2,
                "batch_sampler": {"_target_": "collections.OrderedDict"},
            }
        },
        "batch_sampler excludes batch_size (null)",
    ),
    ("TorchLoaderSpec", {"loader": {"kind": "torch", "pin_memory_device": "cuda"}}, "needs pin_memory"),
    ("ShardedLoaderSpec", {"loader": {"kind": "sharded"}}, "batch_size is required without it"),
    ("ShardedLoaderSpec", {"loader": {"kind": "sharded", "batch_size": 2, "timeout": 5}}, "need num_workers"),
    ("QueueDatasetSpec", {"queue": {"kind": "ram", "capacity": 4, "wait_fill": 8}}, "at most capacity"),
    ("StreamWrapperSpec", {"stream": {"kind": "epochs", "gated": True}}, "need buffer_size >= 1"),
    (
        "DistributedSpec",
        {"loader": {"kind": "torch", "distributed": {"rank": 2, "world_size": 2}}},
        "world_size",
    ),
    (
        "TensorFolderSpec",
        {"dataset": {"kind": "tensor_folder", "root": "/d", "pattern": "*.png"}},
        "extension",
    ),
    (
        "SamplerTargetSpec",
        {"loader": {"kind": "torch", "sampler": {"_target_": "no.such.Sampler"}}},
        "imports",
    ),
    (
        "RandFlipSpec",
        {"queue": {"kind": "ram", "sample_transforms": {"kind": "rand_flip", "dims": [0]}}},
        "negative",
    ),
    ("RunSpec", {"run": {"report": "out/report.json"}}, "without folders"),
    ("#", {"queue": {"kind": "ram"}, "loader": {"kind": "torch", "shuffle": True}}, "after a queue"),
]


@pytest.mark.parametrize(("definition", "config", "rule"), ACROSS_FIELDS, ids=[c[2] for c in ACROSS_FIELDS])
def test_a_rule_the_schema_cannot_check_is_in_the_description(
    definition: str, config: dict[str, Any], rule: str
) -> None:
    """The schema lets it through, ``validate`` refuses it, and the kind's description names the rule."""
    config = {"dataset": {"kind": "synthetic"}} | config
    assert problems(ROOT, config) == []
    with pytest.raises(ConfigError):
        loaderfactory.validate(config)
    described = SCHEMA if definition == "#" else SCHEMA["$defs"][definition]
    assert "Rules the schema cannot check" in described["description"]
    assert rule in described["description"]


def test_every_rule_the_schema_cannot_check_has_a_docstring() -> None:
    """The descriptions list each spec's validators by their docstrings, so every validator has one."""
    for model in MODELS:
        decorators = model.__pydantic_decorators__
        rules = [*decorators.field_validators.values(), *decorators.model_validators.values()]
        for rule in rules:
            assert inspect.getdoc(rule.func), (
                f"{model.__name__}.{rule.cls_var_name} needs a one-line docstring"
            )
