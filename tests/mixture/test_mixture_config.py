"""A mixture's config is refused before anything runs, at the path of what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderfactory import build_loader, compose
from loaderfactory.errors import ConfigError


class Empty:
    def __len__(self) -> int:
        return 0

    def __getitem__(self, index: int) -> Any:
        raise IndexError(index)


def source(length: int = 20, weight: float | None = 1.0) -> dict[str, Any]:
    return {
        "dataset": {"kind": "synthetic", "length": length},
        **({} if weight is None else {"weight": weight}),
    }


def refused(dataset: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build_loader(
            {"dataset": {"kind": "mixture", **dataset}, "loader": {"kind": "torch", "batch_size": 2}}
        )
    return caught.value


SCHEDULE = {"sources": {"a": source(weight=None), "b": source(weight=None)}, "stop": {"samples": 40}}
CASES = {
    "unknown source in a schedule point": (
        {**SCHEDULE, "weights": [{"at": 0, "weights": {"a": 1}}, {"at": 5, "weights": {"c": 1}}]},
        "dataset.weights.1.weights.c",
        "no source is called 'c'",
    ),
    "points out of time order": (
        {**SCHEDULE, "weights": [{"at": 9, "weights": {"a": 1}}, {"at": 5, "weights": {"b": 1}}]},
        "dataset.weights.1.at",
        "in time order",
    ),
    "a point of zero weights": (
        {**SCHEDULE, "weights": [{"at": 0, "weights": {"a": 0, "b": 0}}]},
        "dataset.weights.0.weights",
        "every weight is 0",
    ),
    "a schedule without a fixed epoch": (
        {**SCHEDULE, "weights": [{"at": 0, "weights": {"a": 1}}], "stop": "all_exhausted"},
        "dataset.stop",
        "stop: {samples: N}",
    ),
    "a fraction without the run's length": (
        {**SCHEDULE, "weights": [{"at": 0, "weights": {"a": 1}}], "at": "fraction"},
        "dataset.run_samples",
        "at: fraction needs",
    ),
    "a negative weight": ({"sources": {"a": source(weight=-1)}}, "dataset.sources.a.weight", "must be ≥ 0"),
    "a zero weight": (
        {"sources": {"a": source(), "b": source(weight=0)}},
        "dataset.sources.b.weight",
        "never reads this source",
    ),
    "some weights left out": (
        {"sources": {"a": source(), "b": source(weight=None)}},
        "dataset.sources",
        "give every source a weight, or none",
    ),
    "stratified without the global batch": (
        {"sources": {"a": source()}, "batching": "stratified"},
        "dataset.global_batch",
        "stratified batching needs the global batch",
    ),
    "a source without samples": (
        {"sources": {"a": source(), "empty": source(length=20)}, "sources_empty": True},
        "dataset.sources.empty.dataset",
        "has no samples",
    ),
    "more passes than max_repeats": (
        {"sources": {"a": source(100), "b": source(5)}, "stop": "all_exhausted", "max_repeats": 3},
        "dataset.max_repeats",
        "source 'b' (5 samples) would be read 20 times an epoch",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_bad_mixture_is_refused_at_its_path(case: str) -> None:
    dataset, path, told = CASES[case]
    if dataset.pop("sources_empty", False):  # the built-in kinds refuse to be empty: a dataset of yours
        dataset["sources"]["empty"] = {"dataset": {"_target_": f"{__name__}.Empty"}, "weight": 1}
    error = refused(dataset)
    assert path in error.paths, error
    assert told in str(error)


def test_a_sources_own_problem_is_reported_at_its_path_inside_the_mixture(tmp_path: Path) -> None:
    missing = {"dataset": {"kind": "tensor_folder", "root": str(tmp_path / "nowhere")}, "weight": 1}
    error = refused({"sources": {"a": source(), "b": missing}})
    assert error.paths == ["dataset.sources.b.dataset.root"]


def test_the_preset_builds_and_its_overrides_validate() -> None:
    config = compose(["dataset=web_and_curated", "dataset.stop={samples:64}", "dataset.sources.web.weight=1"])
    with build_loader(config) as loader:
        assert len(loader.dataset) == 64
        assert loader.dataset.draws(0).tolist() == [32, 32]
