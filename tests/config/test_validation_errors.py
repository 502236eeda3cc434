"""Bad configs: one ConfigError naming every wrong dotted path, the value given and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from loaderfactory import ConfigError, LoaderSpec, available, validate

SYNTH = {"kind": "synthetic", "length": 8}


def cfg(**slots: Any) -> dict[str, Any]:
    """A config with a small synthetic dataset unless the case sets its own ``dataset``."""
    return {"dataset": SYNTH, **slots}


BAD_CONFIGS = [
    # pytest.param(config, expected paths in report order, pattern the message must match, id=...)
    pytest.param(
        cfg(prefetch={"kind": "thread", "buffer_size": 0}),
        ["prefetch.buffer_size"],
        r"must be ≥ 1, got 0",
        id="buffer_size_zero",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "repeats": 0}),
        ["prefetch.repeats"],
        r"must be ≥ 1, got 0",
        id="repeats_zero",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "timeout": -1}),
        ["prefetch.timeout"],
        r"must be > 0.0, got -1",
        id="timeout_negative",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "timeout": float("nan")}),
        ["prefetch.timeout"],
        r"got nan",
        id="timeout_nan",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "timeout": "soon"}),
        ["prefetch.timeout"],
        r"must be a number, got 'soon'",
        id="timeout_text",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "buffer_timeout": -2}),
        ["prefetch.buffer_timeout"],
        r"must be > 0.0, got -2",
        id="alias_buffer_timeout_negative",
    ),
    pytest.param(
        cfg(prefetch={"kind": "thread", "timeout": 1, "buffer_timeout": 2}),
        ["prefetch.buffer_timeout"],
        r"names the same field as 'timeout'; give only one of them",
        id="alias_and_name_timeout",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "batch_size": 4, "bs": 4}),
        ["loader.bs"],
        r"names the same field as 'batch_size'; give only one of them",
        id="alias_and_name_batch_size",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "bs": 0}), ["loader.bs"], r"must be ≥ 1, got 0", id="alias_bs_zero"
    ),
    pytest.param(
        cfg(prefetch={"kind": "thred"}),
        ["prefetch.kind"],
        r"unknown prefetch kind 'thred'. Did you mean 'thread'\? Known: thread",
        id="unknown_prefetch_kind",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetik"}},
        ["dataset.kind"],
        r"Did you mean 'synthetic'\? Known: .*tensor_folder",
        id="unknown_dataset_kind",
    ),
    pytest.param(
        cfg(prefetch={"kind": 3}), ["prefetch.kind"], r"unknown prefetch kind 3", id="non_string_kind"
    ),
    pytest.param(
        cfg(loader={"batch_size": 3}),
        ["loader.kind"],
        r"missing; choose one of: .*torch",
        id="loader_without_kind",
    ),
    pytest.param(
        cfg(prefetch=5),
        ["prefetch"],
        r"must be a mapping with a 'kind' key, got 5",
        id="prefetch_not_a_mapping",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "prefetch_factor": 2}),
        ["loader.prefetch_factor"],
        r"needs worker processes, but num_workers is 0",
        id="worker_option_without_workers",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "persistent_workers": True, "timeout": 5}),
        ["loader.persistent_workers", "loader.timeout"],
        r"needs worker processes",
        id="two_worker_options_without_workers",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "num_workers": -1}),
        ["loader.num_workers"],
        r"must be ≥ 0, got -1",
        id="num_workers_negative",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "num_workers": 1, "multiprocessing_context": "threads"}),
        ["loader.multiprocessing_context"],
        r"must be one of 'fork', 'spawn' or 'forkserver', got 'threads'",
        id="bad_mp_context",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "shuffle": "maybe"}),
        ["loader.shuffle"],
        r"must be true or false, got 'maybe'",
        id="shuffle_not_bool",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "batchsize": 8}),
        ["loader.batchsize"],
        r"unknown field \(got 8\). Did you mean 'batch_size'\? Allowed: .*batch_size, collate",
        id="field_typo",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "collate": {"kind": "defalt"}}),
        ["loader.collate.kind"],
        r"unknown collate kind 'defalt'. Did you mean 'default'",
        id="collate_kind_typo",
    ),
    pytest.param(
        cfg(loader={"kind": "torch", "collate": "stack"}),
        ["loader.collate"],
        r"must be a mapping with a 'kind' key",
        id="collate_not_a_mapping",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "length": 1.5}},
        ["dataset.length"],
        r"must be a whole number, got 1.5",
        id="length_float",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "length": "many"}},
        ["dataset.length"],
        r"must be a whole number, got 'many'",
        id="length_text",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "delay_ms": -5}},
        ["dataset.delay_ms"],
        r"must be ≥ 0.0, got -5",
        id="delay_negative",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "fields": {}}},
        ["dataset.fields"],
        r"at least 1 item",
        id="no_fields",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "fields": {"x": {"dtype": "float33"}}}},
        ["dataset.fields.x.dtype"],
        r"must be one of .*'float32'.*got 'float33'",
        id="bad_dtype",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "fields": {"x": {"shape": [2, 0]}}}},
        ["dataset.fields.x.shape.1"],
        r"must be ≥ 1, got 0",
        id="zero_dim",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "fields": {"y": {"dtype": "int64", "high": 0}}}},
        ["dataset.fields.y.high"],
        r"must be ≥ 1",
        id="field_high_zero",
    ),
    pytest.param(
        {"dataset": {"_target_": "no_such_pkg.Data"}},
        ["dataset._target_"],
        r"cannot import module 'no_such_pkg'",
        id="target_no_module",
    ),
    pytest.param(
        {"dataset": {"_target_": "Data"}},
        ["dataset._target_"],
        r"is not a dotted path",
        id="target_not_dotted",
    ),
    pytest.param(
        {"dataset": {"_target_": "collections.NoSuchThing"}},
        ["dataset._target_"],
        r"module 'collections' has no attribute 'NoSuchThing'",
        id="target_no_attribute",
    ),
    pytest.param(
        {"dataset": {"kind": "tensor_folder"}},
        ["dataset.root"],
        r"required, but missing",
        id="tensor_folder_without_root",
    ),
    pytest.param(
        {"dataset": {"kind": "tensor_folder", "root": "/data", "preprocess": {"kind": "nope"}}},
        ["dataset.preprocess.kind"],
        r"unknown transform kind 'nope'",
        id="unknown_transform",
    ),
    pytest.param(
        cfg(run={"mode": "go"}),
        ["run.mode"],
        r"must be one of 'run', 'validate', 'plan', 'schema', 'index' or 'pack', got 'go'",
        id="run_mode",
    ),
    pytest.param(
        cfg(run={"batches": 0, "step_ms": -1}),
        ["run.batches", "run.step_ms"],
        r"2 problems in the config",
        id="run_numbers",
    ),
    pytest.param(cfg(seed=-1), ["seed"], r"must be ≥ 0, got -1", id="seed_negative"),
    pytest.param(cfg(seed=2**64), ["seed"], r"must be ≤ 9223372036854775807", id="seed_too_big"),
    pytest.param(
        cfg(bogus=1),
        ["bogus"],
        r"unknown field \(got 1\). Allowed: dataset, loader, pack, prefetch, queue, resume, run, seed, "
        r"stream",
        id="unknown_root_key",
    ),
    pytest.param(
        {},
        ["dataset"],
        rf"missing; choose a kind \({', '.join(k for k in available('dataset') if k[0] != '_')}\), "
        "give a _target_, or pass dataset=",
        id="no_dataset",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "length": "???"}},
        ["dataset.length"],
        r"is '\?\?\?' \(mandatory\) and was never set",
        id="mandatory_missing",
    ),
    pytest.param(
        {"dataset": {"kind": "synthetic", "seed": "${nowhere}"}},
        ["dataset.seed"],
        r"interpolation failed",
        id="broken_interpolation",
    ),
]


@pytest.mark.parametrize(("config", "paths", "match"), BAD_CONFIGS)
def test_bad_config_gives_one_error_naming_its_paths(
    config: dict[str, Any], paths: list[str], match: str
) -> None:
    """A bad config raises one ConfigError whose problems are exactly at the wrong paths."""
    with pytest.raises(ConfigError, match=match) as info:
        validate(config)
    assert info.value.paths == paths
    assert str(info.value).startswith(paths[0] if len(paths) == 1 else f"{len(paths)} problems")
    assert isinstance(info.value, ValueError)
    # The user sees our message, not a chained traceback from pydantic's internals.
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, Exception)


def test_table_holds_twenty_distinct_mistakes() -> None:
    """The table above covers 20+ distinct mistakes (ids unique, configs all different)."""
    ids = [case.id for case in BAD_CONFIGS]
    assert len(set(ids)) == len(ids) >= 20
    assert len({repr(case.values[0]) for case in BAD_CONFIGS}) == len(BAD_CONFIGS)


def test_every_problem_is_reported_at_once() -> None:
    """Mistakes in several slots all appear in one error, one line each, in config order."""
    config = {
        "dataset": {"kind": "synthetic", "length": 0},
        "loader": {"kind": "torch", "batch_size": 0, "shufle": True},
        "prefetch": {"kind": "thread", "buffer_size": -1, "repeats": 0},
        "run": {"mode": "fast"},
    }
    with pytest.raises(ConfigError, match=r"^6 problems in the config:") as info:
        validate(config)
    assert info.value.paths == [
        "dataset.length",
        "loader.batch_size",
        "loader.shufle",
        "prefetch.buffer_size",
        "prefetch.repeats",
        "run.mode",
    ]
    lines = str(info.value).splitlines()[1:]
    assert len(lines) == 6
    assert all(line.startswith("  - ") for line in lines)
    assert "Did you mean 'shuffle'?" in lines[2]


def test_unknown_kind_lists_known_kinds_and_closest_match() -> None:
    """An unknown kind names every registered kind and suggests the nearest one."""
    with pytest.raises(ConfigError) as info:
        validate(cfg(loader={"kind": "torhc"}))
    message = str(info.value)
    assert message.startswith("loader.kind: unknown loader kind 'torhc'.")
    assert "Did you mean 'torch'?" in message
    assert "Known: " in message and "torch" in message.split("Known: ")[1]


def test_unknown_kind_far_from_everything_has_no_guess() -> None:
    """With nothing close, the error lists the kinds without a misleading guess."""
    with pytest.raises(ConfigError, match=r"unknown prefetch kind 'zzzzzz'\. Known: thread") as info:
        validate(cfg(prefetch={"kind": "zzzzzz"}))
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize("given", [{"bs": 7}, {"batch_size": 7}])
def test_batch_size_alias_is_accepted(given: dict[str, int]) -> None:
    """The seeds' ``bs`` sets ``batch_size``."""
    spec = validate(cfg(loader={"kind": "torch", **given}))
    assert spec.loader.batch_size == 7


@pytest.mark.parametrize("given", [{"buffer_timeout": 2.5}, {"timeout": 2.5}])
def test_buffer_timeout_alias_is_accepted(given: dict[str, float]) -> None:
    """The seeds' ``buffer_timeout`` sets the prefetch ``timeout``."""
    spec = validate(cfg(prefetch={"kind": "thread", **given}))
    assert spec.prefetch.timeout == 2.5


def test_validate_accepts_every_config_form(tmp_path: Path) -> None:
    """A dict, an OmegaConf node, a YAML path (str or Path) and a spec all validate to the same spec."""
    data = cfg(loader={"kind": "torch", "batch_size": 4}, prefetch={"kind": "thread", "buffer_size": 2})
    path = tmp_path / "data.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(data)))
    expected = validate(data)
    assert isinstance(expected, LoaderSpec)
    for form in (OmegaConf.create(data), path, str(path), expected):
        assert validate(form) == expected
    assert validate(expected) is expected


def test_interpolations_resolve_before_validation() -> None:
    """``${...}`` values are resolved first, so the spec holds the referenced value."""
    spec = validate(
        {
            "seed": 5,
            "dataset": {"kind": "synthetic", "seed": "${seed}", "length": "${run.epochs}"},
            "run": {"epochs": 3},
        }
    )
    assert spec.dataset.seed == 5
    assert spec.dataset.length == 3


def test_interpolated_bad_value_is_reported_at_the_referencing_path() -> None:
    """A value that resolves to something invalid is reported where it is used."""
    with pytest.raises(ConfigError, match="must be ≥ 1, got 0") as info:
        validate({"n": 0, "dataset": {"kind": "synthetic", "length": "${n}"}})
    assert "dataset.length" in info.value.paths


def test_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    """A path that does not exist, or holds broken YAML, is a ConfigError naming the file."""
    with pytest.raises(ConfigError, match="does not exist"):
        validate(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("dataset: {kind: synthetic\n  - oops: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        validate(broken)


@pytest.mark.parametrize("config", [[1, 2], 42, None])
def test_non_mapping_config_is_a_config_error(config: Any) -> None:
    """A config that is not a mapping of slots is refused with a ConfigError, not a TypeError."""
    with pytest.raises(ConfigError, match="must be a mapping of slots"):
        validate(config)


def test_dataset_may_be_left_out_when_an_object_is_passed() -> None:
    """``require_dataset=False`` validates a config whose dataset comes from code."""
    spec = validate({"loader": {"kind": "torch", "batch_size": 2}}, require_dataset=False)
    assert spec.dataset is None


def test_specs_are_frozen() -> None:
    """A validated spec cannot be changed by accident after validation."""
    spec = validate(cfg())
    with pytest.raises(ValueError, match="frozen"):
        spec.seed = 3  # type: ignore[misc]


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
FIELDS = [
    ("prefetch", "buffer_size"),
    ("prefetch", "timeout"),
    ("prefetch", "buffer_timeout"),
    ("prefetch", "repeats"),
    ("prefetch", "copy_echoes"),
    ("prefetch", "kind"),
    ("loader", "batch_size"),
    ("loader", "bs"),
    ("loader", "num_workers"),
    ("loader", "collate"),
    ("loader", "kind"),
    ("dataset", "length"),
    ("dataset", "fields"),
    ("dataset", "kind"),
    ("dataset", "delay_ms"),
    ("run", "mode"),
    ("run", "batches"),
    (None, "seed"),
    (None, "prefetch"),
    (None, "loader"),
    (None, "run"),
]


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(FIELDS), value=JUNK)
def test_junk_values_only_ever_raise_config_error(where: tuple[str | None, str], value: Any) -> None:
    """Whatever junk a field holds, validation accepts it or raises ConfigError, never anything else."""
    slot, field = where
    config: dict[str, Any] = {
        "dataset": dict(SYNTH),
        "loader": {"kind": "torch"},
        "prefetch": {"kind": "thread"},
        "run": {},
    }
    if slot is None:
        config[field] = value
    else:
        config[slot][field] = value
    try:
        validate(config)
    except ConfigError as err:
        assert err.problems, "a ConfigError always carries at least one problem"
        assert all(isinstance(p.path, str) and p.message for p in err.problems)
