"""``per_source`` batching with a global batch per source: every batch is one source's, of that
source's size; the epoch counts global steps; a state resumes between steps; what cannot work is
refused at its config path."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from loaderfactory import build_loader
from loaderfactory.errors import ConfigError

SIZES = {"web": 50, "code": 23, "books": 11}
GLOBAL_BATCHES = {"web": 4, "code": 8, "books": 2}


def mixture(stop: Any = None, **more: Any) -> dict[str, Any]:
    sources = {
        name: {
            "dataset": {"kind": "synthetic", "length": size, "seed": seed, "fields": {"x": {"shape": [1]}}},
            "weight": weight,
            "global_batch": GLOBAL_BATCHES[name],
        }
        for seed, ((name, size), weight) in enumerate(zip(SIZES.items(), (5, 3, 2), strict=True))
    }
    return {
        "kind": "mixture",
        "sources": sources,
        "batching": "per_source",
        "global_batch": 4,
        "stop": stop or {"steps": 60},
        "block": 10,
        "source_key": "source",
        **more,
    }


def config(dataset: dict[str, Any], workers: int = 0, **loader: Any) -> dict[str, Any]:
    return {
        "dataset": dataset,
        "loader": {"kind": "torch", "batch_size": 4, "num_workers": workers, **loader},
        "seed": 3,
    }


def read(batches: Any) -> list[tuple[str, list[int]]]:
    """Each batch as (its one source, the ids it holds); a batch of two sources fails here."""
    out = []
    for batch in batches:
        (source,) = set(batch["source"])
        out.append((source, [int(i) for i in batch["index"]]))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_each_batch_is_one_sources_at_its_global_batch(workers: int) -> None:
    with build_loader(config(mixture(), workers, shuffle=True)) as loader:
        assert len(loader) == 60
        batches = read(loader)
        placed = loader.dataset
        steps = placed.global_steps(0)
        bounds = [placed.locate(start, epoch=0) for start, _ in steps.bounds(0)]
    assert len(batches) == 60
    assert all(len(ids) == GLOBAL_BATCHES[source] for source, ids in batches)
    assert [source for source, _ in batches] == [placed.names[s] for s, _ in bounds]
    counted = Counter(source for source, _ in batches)  # shares count batches, exact over each block
    assert counted == {"web": 30, "code": 18, "books": 12}
    for name, size in SIZES.items():  # each source read pass by pass: every id once a pass
        ids = [i for source, got in batches if source == name for i in got]
        whole = len(ids) // size
        for number in range(whole):
            assert sorted(ids[number * size : (number + 1) * size]) == list(range(size))
        assert len(set(ids[whole * size :])) == len(ids) - whole * size


def test_all_exhausted_counts_whole_steps_until_every_source_was_read() -> None:
    with build_loader(config(mixture("all_exhausted"))) as loader:
        batches = read(loader)
        assert len(loader) == len(batches) == loader.dataset.global_steps(0).count
    for name, size in SIZES.items():
        assert {i for source, ids in batches if source == name for i in ids} == set(range(size))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_between_steps_resumes_the_rest_exactly(workers: int) -> None:
    with build_loader(config(mixture(), workers, shuffle=True)) as loader:
        whole = read(loader)
        loader.set_epoch(0)
        head = read(itertools.islice(iter(loader), 17))
        state = loader.state_dict()
    with build_loader(config(mixture(), workers, shuffle=True)) as resumed:
        resumed.load_state_dict(state)
        assert len(resumed) == 60
        rest = read(resumed)
    assert head + rest == whole


def refused(dataset: dict[str, Any], **loader: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build_loader(config(dataset, **loader))
    return caught.value


CASES = {
    "a batch size per source without per_source": (
        {"batching": "random"},
        {},
        "dataset.sources.web.global_batch",
        "needs batching: per_source",
    ),
    "a schedule": (
        {"weights": [{"at": 0, "weights": {"web": 1}}, {"at": 8, "weights": {"code": 1}}], "at": "steps"},
        {},
        "dataset.weights",
        "one global_batch for every source",
    ),
    "an epoch in samples": ({"stop": {"samples": 100}}, {}, "dataset.stop", "{steps: N}"),
    "another loader batch": ({}, {"batch_size": 3}, "loader.batch_size", "global_batch"),
    "the sharded loader": ({}, {"kind": "sharded"}, "loader.kind", "loader kind torch"),
}


@pytest.mark.parametrize("case", CASES)
def test_what_cannot_work_is_refused_at_its_path(case: str) -> None:
    change, loader, path, told = CASES[case]
    dataset = mixture(**change)
    if "weights" in change:
        for source in dataset["sources"].values():
            del source["weight"]
    error = refused(dataset, **loader)
    assert any(problem.path == path and told in problem.message for problem in error.problems), error
