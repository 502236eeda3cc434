"""``_target_`` anywhere (dataset, sampler, collate, transform) means what it means in Hydra.

Nested ``_target_`` nodes, ``_args_``, ``_partial_``, ``_convert_`` and ``_recursive_`` are handled by
``hydra.utils.instantiate`` at build time, after validation has checked that every target imports;
errors name the path from the root of the user's config.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_forks import cli
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch.utils.data import Dataset

from loaderfactory import ConfigError, build_loader, compose, validate

HERE = __name__
"""This module's import name, for ``_target_`` paths to the helpers below."""

LOADER = {"kind": "torch", "batch_size": 4}


# --- helpers the configs name by _target_ ----------------------------------------------------------------


class Scale:
    """A transform object: multiplies ``y`` by ``factor``."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "y": item["y"] * self.factor}


def shift(item: dict[str, Any], amount: float) -> dict[str, Any]:
    """A transform function with an option: configured by ``_partial_: true``."""
    return {**item, "y": item["y"] + amount}


class Numbers(Dataset[dict[str, Any]]):
    """``y = index``, through ``transform``; keeps ``options`` as given, for tests to look at."""

    def __init__(self, n: int, transform: Callable[..., Any] | None = None, options: Any = None) -> None:
        self.n, self.transform, self.options = n, transform, options

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = {"y": torch.tensor(float(index))}
        return self.transform(item) if self.transform is not None else item


def collate_sums(batch: list[dict[str, Any]], key: str) -> torch.Tensor:
    """A collate function of the user's: the sum of ``key`` over the batch."""
    return torch.stack([item[key] for item in batch]).sum(dim=0)


def config(dataset: dict[str, Any], **slots: Any) -> dict[str, Any]:
    return {"dataset": dataset, "loader": LOADER, **slots}


def numbers(**arguments: Any) -> dict[str, Any]:
    """A ``Numbers`` dataset node with ``arguments``."""
    return {"_target_": f"{HERE}.Numbers", **arguments}


def values(batches: list[Any]) -> list[float]:
    return [v for batch in batches for v in batch["y"].tolist()]


# --- Hydra's keys ------------------------------------------------------------------------------------------


def test_nested_transform_target_arrives_as_an_object() -> None:
    """A ``_target_`` node inside the dataset's arguments is built first and passed as the object."""
    with build_loader(config(numbers(n=4, transform={"_target_": f"{HERE}.Scale", "factor": 3}))) as loader:
        assert isinstance(loader.dataset, Numbers)
        assert isinstance(loader.dataset.transform, Scale) and loader.dataset.transform.factor == 3
        assert values(list(loader)) == [0.0, 3.0, 6.0, 9.0]


def test_args_are_positional_arguments() -> None:
    """``_args_`` are passed by position, to the dataset and to nested targets."""
    dataset = numbers(_args_=[3, {"_target_": f"{HERE}.Scale", "_args_": [-1]}])
    with build_loader(config(dataset)) as loader:
        assert len(loader.dataset) == 3
        assert values(list(loader)) == [0.0, -1.0, -2.0]


def test_partial_gives_a_function_to_call_later() -> None:
    """``_partial_: true`` passes a ``functools.partial`` with the configured options bound."""
    with build_loader(
        config(numbers(n=3, transform={"_target_": f"{HERE}.shift", "_partial_": True, "amount": 10}))
    ) as loader:
        transform = loader.dataset.transform
        assert isinstance(transform, functools.partial)
        assert transform.func is shift and transform.keywords == {"amount": 10}
        assert values(list(loader)) == [10.0, 11.0, 12.0]


@pytest.mark.parametrize(
    ("convert", "mapping", "sequence"),
    [
        (None, DictConfig, ListConfig),  # Hydra's default, `none`: OmegaConf containers
        ("none", DictConfig, ListConfig),
        ("partial", dict, list),
        ("all", dict, list),
    ],
)
def test_convert_decides_the_containers_the_target_gets(
    convert: str | None, mapping: type, sequence: type
) -> None:
    """``_convert_: all`` (or ``partial``) passes plain dicts and lists; by default, OmegaConf's."""
    hydra_keys = {} if convert is None else {"_convert_": convert}
    with build_loader(config(numbers(n=2, options={"sizes": [1, 2], "name": "a"}, **hydra_keys))) as loader:
        options = loader.dataset.options
    assert type(options) is mapping
    assert type(options["sizes"]) is sequence
    assert list(options["sizes"]) == [1, 2] and options["name"] == "a"


def test_recursive_false_leaves_nested_nodes_to_the_target() -> None:
    """``_recursive_: false`` passes a nested ``_target_`` node unbuilt, as Hydra does."""
    dataset = numbers(n=2, options={"_target_": f"{HERE}.Scale", "factor": 2}, _recursive_=False)
    with build_loader(config(dataset)) as loader:
        options = loader.dataset.options
    assert isinstance(options, DictConfig)
    assert options["_target_"] == f"{HERE}.Scale" and options["factor"] == 2


def test_target_dataset_from_compose() -> None:
    """``~dataset +dataset={_target_: ...}`` over the presets builds the dataset and its transform."""
    cfg = compose(
        [
            "~dataset",
            f"+dataset={{_target_: {HERE}.Numbers, n: 3, transform: {{_target_: {HERE}.Scale, factor: 2}}}}",
            "loader.batch_size=3",
            "~prefetch",
        ]
    )
    with build_loader(cfg) as loader:
        assert isinstance(loader.dataset.transform, Scale)
        assert values(list(loader)) == [0.0, 2.0, 4.0]


# --- _target_ in the other slots ----------------------------------------------------------------------------


def queue_config(**queue: Any) -> dict[str, Any]:
    """Numbers 0..3 through a small ``ram`` queue, batches of 2, ``queue``'s fields added."""
    return {
        "dataset": numbers(n=4),
        "queue": {"kind": "ram", "epoch_size": 3, "batch_size": 2, **queue},
        "loader": {"kind": "torch", "batch_size": 2},
    }


def test_transform_target_in_queue_sample_transforms_is_built() -> None:
    """A ``_target_`` transform in the queue's ``sample_transforms`` list is applied to every drawn item."""
    with build_loader(queue_config(sample_transforms=[{"_target_": f"{HERE}.Scale", "factor": 0}])) as loader:
        batches = list(loader)
    assert len(batches) == 3
    assert values(batches) == [0.0] * 6


def test_transform_target_inside_a_compose_is_built() -> None:
    """A ``_target_`` child of a built-in ``compose`` transform is built with its partial options."""
    transforms = {
        "kind": "compose",
        "transforms": [
            {"_target_": f"{HERE}.Scale", "factor": 0},
            {"_target_": f"{HERE}.shift", "_partial_": True, "amount": 5},
        ],
    }
    with build_loader(queue_config(sample_transforms=transforms)) as loader:
        assert values(list(loader)) == [5.0] * 6


def test_collate_target_replaces_the_dict_collate_of_the_queue() -> None:
    """A ``_target_`` collate with ``_partial_`` takes the place of the queue's default ``dict`` collate."""
    collate = {"_target_": f"{HERE}.collate_sums", "_partial_": True, "key": "y"}
    with build_loader(
        queue_config(sample_transforms=[{"_target_": f"{HERE}.Scale", "factor": 0}], collate=collate)
    ) as loader:
        batches = list(loader)
    assert [b.tolist() for b in batches] == [0.0, 0.0, 0.0]


def test_collate_target_of_the_torch_loader_is_built() -> None:
    """The loader's ``collate`` by ``_target_`` sums each batch of 2."""
    collate = {"_target_": f"{HERE}.collate_sums", "_partial_": True, "key": "y"}
    with build_loader(config(numbers(n=4), loader={**LOADER, "batch_size": 2, "collate": collate})) as loader:
        assert [b.tolist() for b in loader] == [1.0, 5.0]


# --- validation: every _target_ imports ---------------------------------------------------------------------

NOT_IMPORTABLE = [
    pytest.param(
        config(numbers(n=2, transform={"_target_": f"{HERE}.NoSuchTransform"})),
        ["dataset.transform._target_"],
        rf"^dataset\.transform\._target_: module '{HERE}' has no attribute 'NoSuchTransform'",
        id="nested_transform",
    ),
    pytest.param(
        config(numbers(n=2, options={"steps": [{"_target_": f"{HERE}.Scale"}, {"_target_": "no_pkg.Step"}]})),
        ["dataset.options.steps.1._target_"],
        r"cannot import module 'no_pkg'",
        id="in_a_list",
    ),
    pytest.param(
        config(numbers(n=2, transform={"_target_": "Scale"})),
        ["dataset.transform._target_"],
        r"'Scale' is not a dotted path",
        id="not_dotted",
    ),
    pytest.param(
        config(numbers(n=2, transform={"_target_": 3})),
        ["dataset.transform._target_"],
        r"must be a dotted path like 'my_package.MyClass', got 3",
        id="not_a_string",
    ),
    pytest.param(
        config(numbers(n=2), loader={**LOADER, "collate": {"_target_": "torch.utils.data.no_collate"}}),
        ["loader.collate._target_"],
        r"has no attribute 'no_collate'",
        id="loader_collate",
    ),
    pytest.param(
        queue_config(
            sample_transforms=[{"_target_": f"{HERE}.Scale", "factor": 0}, {"_target_": f"{HERE}.Nope"}]
        ),
        ["queue.sample_transforms.1._target_"],
        r"has no attribute 'Nope'",
        id="queue_sample_transform",
    ),
]


@pytest.mark.parametrize(("cfg", "paths", "match"), NOT_IMPORTABLE)
def test_a_target_that_does_not_import_is_refused_at_validation(
    cfg: dict[str, Any], paths: list[str], match: str
) -> None:
    """Every ``_target_``, nested ones included, must import; the error names its exact path."""
    with pytest.raises(ConfigError, match=match) as info:
        validate(cfg)
    assert info.value.paths == paths


# --- paths from the user's root -----------------------------------------------------------------------------


def under_data(cfg: dict[str, Any]) -> DictConfig:
    """``cfg`` as the ``data`` node of a user's larger config (``cfg.data`` in their app)."""
    node = OmegaConf.create({"model": {"width": 8}, "data": cfg}).data
    assert isinstance(node, DictConfig)
    return node


def test_validation_errors_name_the_path_from_the_users_root() -> None:
    """``build_loader(cfg.data)`` reports a nested ``_target_`` that does not import at ``data.dataset.…``."""
    node = under_data(config(numbers(n=2, transform={"_target_": f"{HERE}.NoSuchTransform"})))
    with pytest.raises(ConfigError, match=r"^data\.dataset\.transform\._target_: module ") as info:
        build_loader(node)
    assert info.value.paths == ["data.dataset.transform._target_"]


@pytest.mark.parametrize(
    ("cfg", "path", "match"),
    [
        pytest.param(
            config(numbers(m=2)),
            "data.dataset",
            r"Numbers\(m\): .*unexpected keyword argument 'm'",
            id="dataset_argument",
        ),
        pytest.param(
            config(numbers(n=2, transform={"_target_": f"{HERE}.Scale"})),
            "data.dataset",
            r"Scale.__init__\(\) missing 1 required positional argument: 'factor'",
            id="nested_argument",
        ),
        pytest.param(
            config(
                numbers(n=2), loader={**LOADER, "collate": {"_target_": f"{HERE}.collate_sums", "key": "y"}}
            ),
            "data.loader.collate",
            r"collate_sums\(key\): .*missing 1 required positional argument: 'batch'.*needs _partial_: true",
            id="collate_without_partial",
        ),
        pytest.param(
            config(
                numbers(n=2),
                loader={**LOADER, "sampler": {"_target_": "torch.utils.data.RandomSampler", "bogus": 1}},
            ),
            "data.loader.sampler",
            r"RandomSampler\(bogus, data_source\): .*unexpected keyword argument 'bogus'",
            id="sampler_argument",
        ),
        pytest.param(
            queue_config(collate={"_target_": f"{HERE}.collate_sums", "key": "y"}),
            "data.queue.collate",
            r"needs _partial_: true",
            id="queue_collate_without_partial",
        ),
    ],
)
def test_build_errors_name_the_path_from_the_users_root(cfg: dict[str, Any], path: str, match: str) -> None:
    """What only instantiating finds (a wrong argument) is a ConfigError at the node's full path."""
    with pytest.raises(ConfigError, match=match) as info:
        build_loader(under_data(cfg))
    assert info.value.paths == [path]
    with pytest.raises(ConfigError) as plain:
        build_loader(cfg)
    assert plain.value.paths == [path.removeprefix("data.")]


def test_a_queue_transform_build_error_names_its_list_entry() -> None:
    """A transform of ``sample_transforms`` that fails to build is reported at its own entry."""
    cfg = queue_config(
        sample_transforms=[{"_target_": f"{HERE}.Scale", "factor": 0}, {"_target_": f"{HERE}.Scale"}]
    )
    with pytest.raises(ConfigError) as info:
        build_loader(under_data(cfg))
    assert info.value.paths == ["data.queue.sample_transforms.1"]


# --- kind or _target_ ---------------------------------------------------------------------------------------


def test_kind_and_target_hint_names_the_override_from_the_root() -> None:
    """A dataset with both ``kind`` and ``_target_`` is refused, with the overrides that fix it."""
    both = config({"kind": "synthetic", "_target_": f"{HERE}.Numbers", "n": 2})
    with pytest.raises(ConfigError) as info:
        validate(both)
    assert info.value.paths == ["dataset._target_"]
    assert (
        "give either 'kind' or '_target_', not both (on the command line: ~dataset +dataset._target_=...)"
        in str(info.value)
    )
    with pytest.raises(ConfigError) as nested:
        build_loader(under_data(both))
    assert nested.value.paths == ["data.dataset._target_"]
    assert "(on the command line: ~data.dataset +data.dataset._target_=...)" in str(nested.value)


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_cli_kind_and_target_hint_and_its_fix(tmp_path: Path) -> None:
    """On the command line a ``_target_`` added to the preset fails naming the fix, and the fix validates."""
    target = "loaderfactory.components.data.datasets.SyntheticDataset"
    bad = cli(tmp_path, "run.mode=validate", f"+dataset._target_={target}")
    assert bad.returncode == 2, bad.stderr
    assert "dataset._target_: give either 'kind' or '_target_', not both" in bad.stderr
    assert "~dataset +dataset._target_=..." in bad.stderr
    good = cli(tmp_path, "run.mode=validate", "~dataset", f"+dataset._target_={target}", "+dataset.length=8")
    assert good.returncode == 0, good.stderr
    assert "config OK" in good.stdout
