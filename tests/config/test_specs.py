"""Specs: strict and frozen, one vocabulary with the seeds' aliases, shared field types, layering."""

from __future__ import annotations

import ast
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

import loaderfactory
from loaderfactory import available
from loaderfactory.config import registry
from loaderfactory.config.schema import json_schema
from loaderfactory.config.specs.base import RamBudget, Spec, WorkersSpec
from loaderfactory.config.specs.dataset import SyntheticDatasetSpec
from loaderfactory.config.specs.kinds import (
    BatchingKindSpec,
    CollateKindSpec,
    DatasetKindSpec,
    LoaderKindSpec,
    StageKindSpec,
)
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.config.specs.pipeline import LoaderSpec, RunSpec
from loaderfactory.config.specs.prefetch import ThreadBufferSpec
from loaderfactory.sizes import SIZE_PATTERN, parse_size

PACKAGE = Path(loaderfactory.__file__).parent


class BudgetSpec(Spec):
    """A spec with one RAM budget, to test the shared type on its own."""

    ram_budget: RamBudget = 0.5


def test_unknown_keys_are_refused() -> None:
    """``extra="forbid"``: a misspelt key is an error, not silently ignored."""
    with pytest.raises(ValidationError, match="buffer_sise"):
        ThreadBufferSpec.model_validate({"buffer_sise": 2})


def test_specs_are_frozen_and_hashable() -> None:
    """A spec cannot be edited after validation; equal specs compare equal."""
    spec = ThreadBufferSpec(buffer_size=2)
    with pytest.raises(ValidationError, match="frozen"):
        spec.buffer_size = 3  # type: ignore[misc]
    assert spec == ThreadBufferSpec.model_validate({"kind": "thread", "buffer_size": 2})


def test_defaults_live_in_the_spec() -> None:
    """An empty mapping validates to the documented defaults."""
    assert ThreadBufferSpec() == ThreadBufferSpec(buffer_size=1, timeout=None, repeats=1, copy_echoes=True)
    loader = TorchLoaderSpec()
    assert (loader.batch_size, loader.num_workers, loader.shuffle) == (32, 0, False)
    root = LoaderSpec()
    assert root.dataset is None and root.prefetch is None
    assert root.loader == TorchLoaderSpec()
    assert root.run == RunSpec()


@pytest.mark.parametrize(
    ("spec", "data", "field", "value"),
    [
        (TorchLoaderSpec, {"bs": 8}, "batch_size", 8),
        (TorchLoaderSpec, {"batch_size": 8}, "batch_size", 8),
        (ThreadBufferSpec, {"buffer_timeout": 1.5}, "timeout", 1.5),
        (ThreadBufferSpec, {"timeout": 1.5}, "timeout", 1.5),
    ],
)
def test_seed_names_are_aliases(spec: type[Spec], data: dict[str, float], field: str, value: float) -> None:
    """The seeds' names (``bs``, ``buffer_timeout``) set the field of the shared vocabulary."""
    assert getattr(spec.model_validate(data), field) == value


def test_aliases_work_as_python_keywords() -> None:
    """Code that builds specs directly may use the field name or the alias."""
    assert TorchLoaderSpec(bs=4).batch_size == 4  # type: ignore[call-arg]
    assert TorchLoaderSpec(batch_size=4).batch_size == 4


@pytest.mark.parametrize(
    ("spec", "data", "match"),
    [
        (
            TorchLoaderSpec,
            {"bs": 8, "batch_size": 8},
            r"bs\n.*names the same field as 'batch_size'",
        ),
        (
            ThreadBufferSpec,
            {"timeout": 1, "buffer_timeout": 1},
            r"buffer_timeout\n.*names the same field as 'timeout'",
        ),
    ],
)
def test_alias_and_name_together_are_refused(spec: type[Spec], data: dict[str, float], match: str) -> None:
    """Giving a field under two names is an error even when the values agree: which wins is a guess."""
    with pytest.raises(ValidationError, match=match):
        spec.model_validate(data)


def test_dumped_specs_validate_again() -> None:
    """``model_dump`` (by name or by alias) round-trips through validation."""
    spec = LoaderSpec.model_validate(
        {
            "dataset": {"kind": "synthetic", "length": 5},
            "loader": {"kind": "torch", "bs": 2},
            "prefetch": {"kind": "thread"},
        }
    )
    for by_alias in (False, True):
        assert LoaderSpec.model_validate(spec.model_dump(mode="json", by_alias=by_alias)) == spec


def test_cross_field_rule_is_located_at_the_field_to_change() -> None:
    """A worker option without workers points at that option, not at the whole loader."""
    with pytest.raises(ValidationError) as info:
        TorchLoaderSpec(prefetch_factor=2)
    (error,) = info.value.errors()
    assert error["loc"] == ("prefetch_factor",)
    assert "needs worker processes" in error["msg"]
    assert TorchLoaderSpec(num_workers=1, prefetch_factor=2).prefetch_factor == 2


def test_workers_spec() -> None:
    """Workers are a count and a type, thread or process."""
    assert WorkersSpec() == WorkersSpec(num_workers=0, worker_type="process")
    assert WorkersSpec(num_workers=2, worker_type="thread").worker_type == "thread"
    with pytest.raises(ValidationError):
        WorkersSpec(worker_type="fiber")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        WorkersSpec(num_workers=-1)


def test_synthetic_fields_validate_dtype_and_shape() -> None:
    """Synthetic fields know their dtypes and refuse empty dimensions."""
    spec = SyntheticDatasetSpec.model_validate({"fields": {"x": {"shape": [2, 3], "dtype": "bfloat16"}}})
    assert spec.fields["x"].shape == [2, 3]
    with pytest.raises(ValidationError):
        SyntheticDatasetSpec.model_validate({"fields": {"x": {"shape": [-1]}}})


# --- sizes and RAM budgets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2GiB", 2 * 2**30),
        ("2gib", 2 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5 GB", 1_500_000_000),
        ("2.3KB", 2300),
        (" 10B ", 10),
        ("1TiB", 2**40),
        ("3kb", 3000),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    """Decimal and binary units, any case, optional spaces and fractions."""
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "2", "2 gigs", "-1GiB", "2GiBs", "1e3KB", "two MB"])
def test_parse_size_refuses_non_sizes(text: str) -> None:
    """A string that is not a number and a unit is a ValueError that lists the units."""
    with pytest.raises(ValueError, match=r"is not a size; write a number and a unit.*units: B, KB"):
        parse_size(text)


@pytest.mark.parametrize(
    "text", ["2GiB", "2gib", "1.5 GB", " 10B ", "3kb", "", "GiB", "2", "-1GiB", "2GiBs", "1e3KB", "2 MiB\n"]
)
def test_the_schema_pattern_accepts_what_parse_size_reads(text: str) -> None:
    """The JSON schema's size ``pattern`` and ``parse_size`` agree on what a size string is."""
    try:
        parse_size(text)
        parsed = True
    except ValueError:
        parsed = False
    assert (re.match(SIZE_PATTERN, text) is not None) == parsed


def test_parse_size_is_still_importable_from_the_spec_base() -> None:
    """``loaderfactory.config.specs.base.parse_size`` stays the one parser (re-exported from ``sizes``)."""
    from loaderfactory.config.specs import base

    assert base.parse_size is parse_size


UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


@given(
    number=st.integers(0, 10**6),
    unit=st.sampled_from(sorted(UNITS)),
    upper=st.booleans(),
    space=st.booleans(),
)
def test_parse_size_round_trips_whole_numbers(number: int, unit: str, upper: bool, space: bool) -> None:
    """Writing ``n`` and a unit parses to exactly ``n`` times the unit, whatever the case and spacing."""
    text = f"{number}{' ' if space else ''}{unit.upper() if upper else unit}"
    assert parse_size(text) == number * UNITS[unit]


@given(tenths=st.integers(0, 10**6), unit=st.sampled_from(sorted(UNITS)))
def test_parse_size_is_exact_for_decimal_fractions(tenths: int, unit: str) -> None:
    """One decimal place parses exactly (rounded down to whole bytes), with no float drift."""
    text = f"{tenths // 10}.{tenths % 10}{unit}"
    assert parse_size(text) == int(Decimal(tenths) * UNITS[unit] / 10)


@given(fraction=st.floats(min_value=0, max_value=1, exclude_min=True))
def test_ram_budget_fraction_round_trips(fraction: float) -> None:
    """A number in (0, 1] is kept as that fraction of available memory."""
    assert BudgetSpec(ram_budget=fraction).ram_budget == fraction


@given(number=st.integers(1, 10**5), unit=st.sampled_from(sorted(UNITS)))
def test_ram_budget_size_round_trips(number: int, unit: str) -> None:
    """A size string becomes a whole number of bytes."""
    budget = BudgetSpec(ram_budget=f"{number}{unit}").ram_budget
    assert budget == number * UNITS[unit]
    assert isinstance(budget, int)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, r"must be in \(0, 1\]"),
        (1.5, r"must be in \(0, 1\], got 1.5; for an absolute budget write a size string"),
        (-0.1, r"must be in \(0, 1\]"),
        (2048, r"must be in \(0, 1\]"),
        (True, "must be a fraction in"),
        ([1], "must be a fraction in"),
        ("lots", "is not a size"),
        ("0GiB", "at least 1 byte"),
        ("0.1B", "at least 1 byte"),
    ],
)
def test_ram_budget_refuses_nonsense(value: object, match: str) -> None:
    """Out-of-range fractions, bare byte counts, zero sizes and non-numbers are refused with a hint."""
    with pytest.raises(ValidationError, match=match):
        BudgetSpec(ram_budget=value)  # type: ignore[arg-type]


# --- schema and layering -------------------------------------------------------------------------


def test_json_schema_offers_every_registered_kind() -> None:
    """The editor schema has one option per registered kind in every table, and is plain JSON."""
    schema = json.loads(json.dumps(json_schema()))
    for table in registry.TABLES:
        if not available(table):  # an empty table allows only null
            continue
        options = schema["$defs"][f"{table}_kinds"]["oneOf"]
        names = {ref["$ref"].rsplit("/", 1)[1] for ref in options}
        assert names == {registry.lookup(table, kind).spec.__name__ for kind in available(table)}
    slots_and_run = {"dataset", "queue", "loader", "stream", "prefetch", "seed", "resume", "run", "pack"}
    assert set(schema["properties"]) == slots_and_run | {"_target_", "_recursive_", "_convert_", "_partial_"}


def test_json_schema_is_a_valid_schema_that_accepts_the_defaults() -> None:
    """The schema itself is valid Draft 2020-12 and accepts a dumped default config."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    data = LoaderSpec.model_validate({"dataset": {"kind": "synthetic"}}).model_dump(
        mode="json", by_alias=True
    )
    jsonschema.Draft202012Validator(schema).validate(data)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted((PACKAGE / "config" / "specs").glob("*.py")), ids=lambda p: p.name)
def test_specs_never_import_torch_or_hydra(path: Path) -> None:
    """Specs stay importable and readable without torch, Hydra or OmegaConf."""
    assert not _imports(path) & {"torch", "hydra", "omegaconf", "numpy"}


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "components").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_components_never_import_pydantic_or_hydra(path: Path) -> None:
    """Runtime components are usable straight from Python, with no config machinery."""
    assert not _imports(path) & {"pydantic", "pydantic_core", "hydra", "omegaconf"}


# --- slot bases: the hooks a kind's author sees ------------------------------------------------------

SLOT_BASES = {
    "dataset": DatasetKindSpec,
    "queue": BatchingKindSpec,
    "loader": LoaderKindSpec,
    "stream": StageKindSpec,
    "prefetch": StageKindSpec,
    "collate": CollateKindSpec,
}


@pytest.mark.parametrize("table", sorted(SLOT_BASES))
def test_every_built_in_kind_subclasses_its_slots_base(table: registry.Table) -> None:
    """Each built-in kind's spec derives from its slot's base, where the hooks that apply live
    (``_target_`` kinds take the defaults)."""
    specs = {kind: registry.lookup(table, kind).spec for kind in available(table) if kind != "_target_"}
    builtins = {kind: spec for kind, spec in specs.items() if spec.__module__.startswith("loaderfactory.")}
    assert builtins
    assert [kind for kind, spec in builtins.items() if not issubclass(spec, SLOT_BASES[table])] == []


def test_the_spec_base_keeps_only_what_every_spec_declares() -> None:
    """Slot hooks live on the slot bases: the plain ``Spec`` offers none of them."""
    hooks = {
        name
        for base in SLOT_BASES.values()
        for name, value in vars(base).items()
        if callable(value) and not name.startswith("__")
    }
    assert hooks == {
        "collated_alive",
        "empty_epoch_problems",
        "known_keys",
        "known_length",
        "read_ahead",
        "refuse_after_batches",
        "reused_batches",
        "wanted_keys",
    }
    assert [name for name in hooks if hasattr(Spec, name)] == []
