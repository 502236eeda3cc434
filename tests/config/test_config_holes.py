"""Values that used to slip past validation: each is a ConfigError (or a warning) naming its path."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory import ConfigError, compose, validate
from loaderfactory.builders import BuildContext
from loaderfactory.builders.sharded import build_sharded_loader
from loaderfactory.components.data.collate import DictCollate
from loaderfactory.config.specs.base import MAX_WORKERS
from loaderfactory.config.specs.sharded import ShardedLoaderSpec

DATASET = {"kind": "synthetic", "length": 16, "fields": {"image": {"shape": [2]}}}


def problems(config: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate(config)
    return {p.path: p.message for p in info.value.problems}


def with_slot(slot: str, **fields: Any) -> dict[str, Any]:
    kinds = {"queue": "ram", "loader": "sharded", "prefetch": "thread"}
    extra = {"batch_size": 2} if slot == "loader" else {}
    return {"dataset": DATASET, slot: {"kind": kinds[slot], **extra, **fields}}


class Items:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


# -- values YAML cannot write ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name", "hint"),
    [
        ({1, 2}, "set", "write a list"),
        (torch.tensor(2), "torch.Tensor", r"value.tolist\(\)"),
        (np.arange(3), "numpy.ndarray", r"value.tolist\(\)"),
        (lambda items: items, "function", "_target_"),
    ],
    ids=["set", "tensor", "array", "lambda"],
)
def test_a_value_yaml_cannot_write_is_a_config_error_naming_path_and_type(
    value: object, type_name: str, hint: str
) -> None:
    """A set, tensor, array or lambda in a dict config is a ConfigError at its path, not OmegaConf's error."""
    found = problems(with_slot("queue", num_workers=value))
    assert list(found) == ["queue.num_workers"]
    assert found["queue.num_workers"].startswith(f"a {type_name} is not a config value")
    assert re.search(hint, found["queue.num_workers"])


def test_every_unwritable_value_is_reported_at_once_with_list_indices() -> None:
    """Two unwritable values, one inside a list, are two problems, each at its own path."""
    config = with_slot(
        "queue", num_workers={2}, sample_transforms=[{"kind": "rand_flip", "dims": torch.ones(2)}]
    )
    assert set(problems(config)) == {"queue.num_workers", "queue.sample_transforms.0.dims"}


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("num_workers", np.int64(3), 3),
        ("batch_size", np.int32(4), 4),
        ("avg_item_size", np.float32(0.5), 0.5),
        ("log_sampling", np.bool_(True), True),
    ],
)
def test_numpy_scalars_count_as_their_python_value(field: str, value: Any, expected: Any) -> None:
    """`np.int64(3)` is the int 3 (YAML would write it the same), and the spec holds a plain Python value."""
    spec = validate(with_slot("queue", **{field: value}))
    held = getattr(spec.queue, field)
    assert held == expected and type(held) is type(expected)


def test_a_numpy_bool_is_not_a_count() -> None:
    """`np.bool_(True)` becomes `True`, which the strict specs refuse as a worker count, as they do `true`."""
    assert "queue.num_workers" in problems(with_slot("queue", num_workers=np.bool_(True)))


# -- numbers that must be finite ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.inf, "must be a finite number, got inf"),
        (math.nan, "must be a finite number, got nan"),
        (1e308, "must be ≤ 1000000000.0, got 1e+308"),
    ],
)
def test_avg_item_size_must_be_finite_and_sane(value: float, message: str) -> None:
    """`avg_item_size: .inf` (or a size whose bytes overflow) is refused, not an OverflowError at build."""
    assert problems(with_slot("queue", avg_item_size=value)) == {"queue.avg_item_size": message}


def test_avg_item_size_inf_from_yaml_is_refused(tmp_path: Path) -> None:
    """YAML's own `.inf` reaches the spec as a float and is refused there."""
    path = tmp_path / "config.yaml"
    path.write_text("dataset: {kind: synthetic, length: 4}\nqueue: {kind: ram, avg_item_size: .inf}\n")
    assert problems(str(path)) == {"queue.avg_item_size": "must be a finite number, got inf"}


@pytest.mark.parametrize(
    ("transform", "path"),
    [
        ({"kind": "gaussian_noise", "std": math.inf}, "std"),
        ({"kind": "gaussian_noise", "std": math.nan}, "std"),
        ({"kind": "gaussian_noise", "mean": -math.inf}, "mean"),
        ({"kind": "gaussian_noise", "p": math.nan}, "p"),
        ({"kind": "normalize", "mean": [0.0, math.nan]}, "mean.1"),
        ({"kind": "normalize", "mean": math.inf}, "mean"),
        ({"kind": "normalize", "std": [1.0, math.inf]}, "std.1"),
        ({"kind": "normalize", "eps": math.inf}, "eps"),
        ({"kind": "rand_flip", "p": math.nan}, "p"),
        ({"kind": "compose", "transforms": [{"kind": "rand_permute"}], "p": math.nan}, "p"),
    ],
)
def test_nan_and_inf_transform_parameters_are_refused(transform: dict[str, Any], path: str) -> None:
    """A NaN or infinite transform parameter would fill every tensor with NaNs: it is refused at its path."""
    found = problems(with_slot("queue", sample_transforms=[transform]))
    assert list(found) == [f"queue.sample_transforms.0.{path}"]
    assert found[f"queue.sample_transforms.0.{path}"].startswith("must be a finite number, got")


def test_an_infinite_timeout_says_null_waits_forever() -> None:
    """`timeout: .inf` is meant as "forever"; the error says that is written null."""
    found = problems(with_slot("prefetch", timeout=math.inf))
    assert found == {"prefetch.timeout": "must be a finite number of seconds, got inf; null waits forever"}


# -- worker counts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("slot", ["queue", "loader"])
def test_worker_counts_have_an_upper_bound(slot: str) -> None:
    """10⁹ workers is a typo, not a plan: refused above MAX_WORKERS, which itself is accepted."""
    found = problems(with_slot(slot, num_workers=10**9))
    assert found == {f"{slot}.num_workers": f"must be ≤ {MAX_WORKERS}, got 1000000000"}
    assert getattr(validate(with_slot(slot, num_workers=MAX_WORKERS)), slot).num_workers == MAX_WORKERS


# -- thread_pool, the seed's name for worker_type ---------------------------------------------------------


@pytest.mark.parametrize(
    ("thread_pool", "worker_type"), [(True, "process"), (False, "thread"), (True, "thread")]
)
def test_thread_pool_with_worker_type_is_refused_like_any_alias_pair(
    thread_pool: bool, worker_type: str
) -> None:
    """`thread_pool` and `worker_type` name one setting: together they are refused, even when they agree."""
    found = problems(with_slot("loader", thread_pool=thread_pool, worker_type=worker_type))
    assert found == {"loader.thread_pool": "names the same field as 'worker_type'; give only one of them"}


def test_thread_pool_alone_still_sets_worker_type() -> None:
    """The seed's `thread_pool: true/false` alone is `worker_type: thread/process`."""
    assert validate(with_slot("loader", thread_pool=True)).loader.worker_type == "thread"
    assert validate(with_slot("loader", thread_pool=False)).loader.worker_type == "process"


def test_thread_pool_conflicts_are_reported_with_other_alias_pairs() -> None:
    """`bs` with `batch_size` and `thread_pool` with `worker_type` are two problems in one error."""
    found = problems(with_slot("loader", bs=4, thread_pool=True, worker_type="process"))
    assert set(found) == {"loader.bs", "loader.thread_pool"}


def test_thread_pool_must_be_a_bool_at_its_path() -> None:
    """`thread_pool: "yes"` is refused at `loader.thread_pool`, not at the whole slot."""
    assert problems(with_slot("loader", thread_pool="yes")) == {
        "loader.thread_pool": "must be true or false, got 'yes'"
    }


def test_thread_pool_over_the_sharded_preset_is_refused() -> None:
    """The preset lists worker_type, so `+loader.thread_pool=true` over it is refused like `+loader.bs=4`."""
    found = problems(compose(["loader=sharded", "+loader.thread_pool=true"]))
    assert set(found) == {"loader.thread_pool"}


# -- collate -----------------------------------------------------------------------------------------


def test_a_filtered_key_missing_from_a_later_item_names_its_index_and_keys() -> None:
    """A `keys` entry missing from item 2 (not the first) is a KeyError naming item 2 and its keys."""
    items = [
        {"vol": torch.zeros(1), "label": 0},
        {"vol": torch.zeros(1), "label": 1},
        {"vol": torch.zeros(1)},
    ]
    with pytest.raises(
        KeyError, match=r"collate keys \['label'\] are not in the item; it has \['vol'\] \(item 2 of"
    ):
        DictCollate(keys=["vol", "label"])(items)
    with pytest.raises(
        KeyError, match=r"\['label'\], taken from item 0, are not in the item; .* \(item 2 of the 3"
    ):
        DictCollate()(items)


# -- ranks left without data -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "n", "message"),
    [
        (
            {"balance": "drop", "distributed": {"rank": 1, "world_size": 4}},
            3,
            r"loader.balance: 'drop' leaves rank 1 of 4 no data: an epoch has 3 indices, fewer than the 4",
        ),
        (
            {"balance": "uneven", "distributed": {"rank": 3, "world_size": 4}},
            3,
            r"loader.balance: 'uneven' leaves rank 3 of 4 no data",
        ),
        (
            {"batch_size": 8, "last_batch": "discard", "distributed": {"rank": 0, "world_size": 2}},
            10,
            r"loader.last_batch: 'discard' leaves rank 0 of 2 no batches: it gets 5 indices .* one step of 8",
        ),
    ],
)
def test_a_rank_left_without_batches_warns_at_the_field_to_change(
    fields: dict[str, Any], n: int, message: str
) -> None:
    """Fewer items than ranks (or than one step, with discard) warns when the loader is built, naming why."""
    spec = ShardedLoaderSpec.model_validate({"batch_size": 2, **fields})
    with pytest.warns(UserWarning, match=message):
        loader = build_sharded_loader(spec, Items(n), BuildContext())
    with loader:
        assert len(loader) == len(list(loader)) == 0


def test_pad_and_ranks_with_data_build_silently() -> None:
    """`pad` gives every rank data, and an uneven rank that gets some does not warn (warnings are errors)."""
    for balance, rank in (("pad", 3), ("uneven", 2)):
        spec = ShardedLoaderSpec.model_validate(
            {"batch_size": 2, "balance": balance, "distributed": {"rank": rank, "world_size": 4}}
        )
        with build_sharded_loader(spec, Items(3), BuildContext()) as loader:
            assert len(loader) == 1
