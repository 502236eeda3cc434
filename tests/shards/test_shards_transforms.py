"""``dataset.transforms`` on the ``shards`` kind: applied once to every sample, after the batch read and
in the worker, keeping the shard-window order, the shard opens and the stacked batch tensors; seeded
per sample, so runs and resumes repeat the draws; errors named at their config path."""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from shards_data import write_parquet_shards, write_tar_shards

from loaderfactory import build_loader
from loaderfactory.components.data.stacked import StackedItems, default_collate
from loaderfactory.components.data.transforms import ToDtype
from loaderfactory.errors import ConfigError
from loaderfactory.shards import ShardsDataset

HERE = __name__
COUNTS = [20] * 8
TOTAL = sum(COUNTS)
SEED = 7
FLOAT = {"kind": "to_dtype", "dtype": "float32", "apply_on": ["npy"]}
NOISE = {"kind": "gaussian_noise", "std": 1.0, "apply_on": ["npy"]}


def mark(item: dict[str, Any]) -> dict[str, Any]:
    """A plain ``f(item)`` transform counting how often it ran on an item."""
    return {**item, "marked": item.get("marked", 0) + 1}


class Scale:
    """A ``_target_`` transform with an argument: ``npy`` times ``factor``."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "npy": item["npy"] * self.factor}


@pytest.fixture
def urls(tmp_path: Path) -> list[str]:
    return write_tar_shards(tmp_path / "data", COUNTS)


def _config(urls: list[str], transforms: Any = None, workers: int = 0, **loader: Any) -> dict[str, Any]:
    dataset: dict[str, Any] = {"kind": "shards", "urls": urls, "shuffle_window": 2, "open_shards": 2}
    if transforms is not None:
        dataset["transforms"] = transforms
    options = {"kind": "torch", "batch_size": 4, "shuffle": True, "num_workers": workers} | loader
    return {"dataset": dataset, "loader": options, "seed": SEED}


def _epoch(config: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One epoch's batches and the dataset's stats after it."""
    with build_loader(config) as loader:
        batches = list(loader)
        return batches, loader.dataset.stats()


def _ids(batches: list[dict[str, Any]]) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def _rows(batches: list[dict[str, Any]]) -> dict[int, torch.Tensor]:
    return {int(i): row for batch in batches for i, row in zip(batch["cls"], batch["npy"], strict=True)}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_runs_once_on_every_sample(urls: list[str], workers: int) -> None:
    """Every sample of the epoch is transformed exactly once, by the registered and the plain ones
    (tar shards: batches read into batch tensors)."""
    transforms = [FLOAT, {"_target_": f"{HERE}.mark", "_partial_": True}]
    batches, _ = _epoch(_config(urls, transforms, workers))
    ids = _ids(batches)
    assert Counter(ids) == Counter(range(TOTAL))
    assert [int(m) for batch in batches for m in batch["marked"]] == [1] * TOTAL
    assert all(batch["npy"].dtype == torch.float32 for batch in batches)
    assert all(torch.equal(row, torch.full((3,), float(i))) for i, row in _rows(batches).items())


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_runs_once_on_every_parquet_row(tmp_path: Path, workers: int) -> None:
    """The same over Parquet shards, whose batches are read run by run and sample by sample."""
    urls = write_parquet_shards(tmp_path / "rows", COUNTS)
    batches, _ = _epoch(_config(urls, {"_target_": f"{HERE}.mark", "_partial_": True}, workers))
    assert Counter(int(i) for batch in batches for i in batch["id"]) == Counter(range(TOTAL))
    assert [int(m) for batch in batches for m in batch["marked"]] == [1] * TOTAL


def test_the_order_is_the_one_without_transforms(urls: list[str]) -> None:
    """A shuffled epoch with transforms reads the same ids in the same order as without them."""
    plain, _ = _epoch(_config(urls, workers=2))
    transformed, _ = _epoch(_config(urls, [FLOAT, NOISE], workers=2))
    assert _ids(transformed) == _ids(plain)
    assert _ids(plain) != list(range(TOTAL))  # shuffled: the comparison says something


def test_a_target_callable_and_a_registered_transform_both_apply(urls: list[str]) -> None:
    """``_target_`` with arguments and a registered kind, one after the other, as in ``queue``."""
    transforms = [FLOAT, {"_target_": f"{HERE}.Scale", "factor": 2.5}]
    batches, _ = _epoch(_config(urls, transforms))
    assert all(torch.equal(row, torch.full((3,), 2.5 * i)) for i, row in _rows(batches).items())
    single, _ = _epoch(_config(urls, FLOAT))  # one transform, not a list
    assert all(batch["npy"].dtype == torch.float32 for batch in single)


@pytest.mark.parametrize(
    ("transforms", "message"),
    [
        ([FLOAT, {"kind": "rand_flip", "p": 3}], r"dataset\.transforms\.1\.p: must be ≤ 1"),
        ([{"kind": "rand_flipp"}], r"dataset\.transforms\.0\.kind: .*'rand_flip'"),
        ({"kind": "gaussian_noise", "std": -1}, r"dataset\.transforms\.std: must be ≥ 0"),
        ([FLOAT, {"_target_": f"{HERE}.Scale", "factr": 2}], r"dataset\.transforms\.1"),
    ],
)
def test_a_bad_transform_is_named_at_its_path(urls: list[str], transforms: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _epoch(_config(urls, transforms))


def test_a_failing_transform_names_the_sample(urls: list[str]) -> None:
    """A transform that fails on a sample keeps its error type, and says which sample it was on."""
    with pytest.raises(TypeError, match=r"(?s)needs a float tensor.*dataset\.transforms, on sample 'sample"):
        _epoch(_config(urls, NOISE))  # noise on the int64 npy


def test_transforms_keep_the_shard_opens(urls: list[str]) -> None:
    """An epoch with transforms opens its shards as often as the untransformed read (2 workers)."""
    _, plain = _epoch(_config(urls, workers=2))
    _, transformed = _epoch(_config(urls, [FLOAT, NOISE], workers=2))
    assert transformed["samples_read"] == plain["samples_read"] == TOTAL
    assert transformed["shards_opened"] <= 1.2 * plain["shards_opened"]
    assert "note" not in transformed


def test_wrapping_for_augmentation_is_no_longer_needed(urls: list[str]) -> None:
    """What an augmentation wrapper did is a config line: no warning about a hidden order, the
    dataset offers its own order to the loader, and the samples come back augmented."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with build_loader(_config(urls, [FLOAT, {"_target_": f"{HERE}.mark", "_partial_": True}])) as loader:
            assert isinstance(loader.dataset, ShardsDataset)
            batches = list(loader)
            stats = loader.dataset.stats()
    assert all(int(m) == 1 for batch in batches for m in batch["marked"])
    assert stats["shards_opened"] <= len(COUNTS) * 1.2 and "note" not in stats


def test_random_draws_repeat_with_the_seed_whatever_the_workers(urls: list[str]) -> None:
    """Each sample's draw depends on the seed, the epoch and its index: the same with 0 and 2
    workers, different between samples and between epochs."""
    config = _config(urls, [FLOAT, NOISE])
    alone, _ = _epoch(config)
    workers, _ = _epoch(_config(urls, [FLOAT, NOISE], workers=2))
    assert _rows(alone).keys() == set(range(TOTAL))
    assert all(torch.equal(row, _rows(workers)[i]) for i, row in _rows(alone).items())
    noise = [row - i for i, row in _rows(alone).items()]
    assert len({tuple(n.tolist()) for n in noise}) == TOTAL
    with build_loader(config) as loader:
        first, second = _rows(list(loader)), _rows(list(loader))
    assert all(torch.equal(row, _rows(alone)[i]) for i, row in first.items())
    assert not any(torch.equal(row, first[i]) for i, row in second.items())


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unshuffled_epoch_draws_anew_each_epoch(urls: list[str], workers: int) -> None:
    """Without a shuffle the order engine still numbers the epoch: the second pass draws anew."""
    with build_loader(_config(urls, [FLOAT, NOISE], workers, shuffle=False)) as loader:
        first, second = _rows(list(loader)), _rows(list(loader))
    assert first.keys() == second.keys() == set(range(TOTAL))
    assert not any(torch.equal(row, first[i]) for i, row in second.items())


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_draws_what_the_uninterrupted_epoch_draws(urls: list[str], workers: int) -> None:
    config = _config(urls, [FLOAT, NOISE], workers)
    with build_loader(config) as loader:
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        state = copy.deepcopy(loader.state_dict())
        rest = list(batches)
    with build_loader(config) as loader:
        loader.load_state_dict(state)
        resumed = list(loader)
    assert _ids(resumed) == _ids(rest)
    assert all(torch.equal(r, e) for r, e in zip(_rows(resumed).values(), _rows(rest).values(), strict=True))


def test_the_stacked_batch_keeps_the_fields_transforms_leave(urls: list[str]) -> None:
    """A run of a local tar shard read into batch tensors: the transforms see each sample; a field
    they replace is stacked from their output, one they leave is still the batch tensor."""
    converted = ShardsDataset(urls, progress=False, transforms=[ToDtype(torch.float64, ["npy"]), mark])
    marked = ShardsDataset(urls, progress=False, transforms=mark)
    try:
        items = converted.__getitems__(list(range(4)))
        assert isinstance(items, StackedItems)  # the fast path is taken
        assert [item["marked"] for item in items] == [1] * 4
        batch = default_collate(items)
        assert batch["npy"].dtype == torch.float64
        assert torch.equal(batch["npy"], torch.arange(4, dtype=torch.float64)[:, None].expand(4, 3))
        assert converted[5]["marked"] == 1 and converted[5]["npy"].dtype == torch.float64
        left = marked.__getitems__(list(range(4)))
        assert isinstance(left, StackedItems) and [item["marked"] for item in left] == [1] * 4
        stacked = left.stacked["npy"]
        assert default_collate(left)["npy"] is stacked
    finally:
        converted.close()
        marked.close()
