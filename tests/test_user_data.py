"""What users bring as data: lists, tuples, arrays, datasets, iterables, behind any slot combination."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

import loaderfactory
from loaderfactory.errors import ConfigError, ResumeError

ITEMS = list(range(10))


class Squares(Dataset[int]):
    def __len__(self) -> int:
        return len(ITEMS)

    def __getitem__(self, index: int) -> int:
        return ITEMS[index]


class Stream(IterableDataset[int]):
    """A generator-backed IterableDataset: no len, no state."""

    def __iter__(self) -> Iterator[int]:
        yield from ITEMS


class Reiterable:
    """Not a torch dataset at all: an object whose ``__iter__`` starts a new pass."""

    def __iter__(self) -> Iterator[int]:
        return iter(ITEMS)


class SplitStream(IterableDataset[int]):
    """Splits its stream between worker processes, as torch's documentation shows."""

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None:
            return iter(ITEMS)
        return iter(ITEMS[info.id :: info.num_workers])


SOURCES: dict[str, Callable[[], Any]] = {
    "list": lambda: list(ITEMS),
    "tuple": lambda: tuple(ITEMS),
    "numpy": lambda: np.arange(10),
    "tensor": lambda: torch.arange(10),
    "dataset": Squares,
    "iterable_dataset": Stream,
    "reiterable": Reiterable,
}
SAVEABLE = {"list", "tuple", "numpy", "tensor", "dataset"}

STAGES = {
    "loader": {},
    "loader+prefetch": {"prefetch": {"kind": "thread", "buffer_size": 2}},
    "loader+stream": {"stream": {"kind": "epochs", "buffer_size": 2}},
    "loader+stream+prefetch": {
        "stream": {"kind": "epochs", "buffer_size": 1},
        "prefetch": {"kind": "thread", "buffer_size": 2, "repeats": 2},
    },
}


def _values(batches: Any) -> list[int]:
    return [int(v) for batch in batches for v in torch.as_tensor(batch).reshape(-1)]


@pytest.mark.parametrize("stages", list(STAGES))
@pytest.mark.parametrize("source", list(SOURCES))
def test_every_source_runs_behind_every_stage(source: str, stages: str) -> None:
    """Two epochs yield every item each; saving works for indexable sources and names the slot otherwise."""
    config = {"loader": {"kind": "torch", "batch_size": 3}, **STAGES[stages]}
    echoes = 2 if "repeats" in str(STAGES[stages]) else 1
    with loaderfactory.build_loader(config, dataset=SOURCES[source]()) as loader:
        for _ in range(2):
            assert sorted(_values(loader)) == sorted(ITEMS * echoes)
        if source in SAVEABLE:
            state = loader.state_dict()
            assert state["slots"]["dataset"]["state"] == {"length": 10}
        else:
            with pytest.raises(ResumeError, match=r"^dataset: a (Stream|Reiterable) has no state_dict\(\)"):
                loader.state_dict()


@pytest.mark.parametrize("source", ["list", "numpy", "dataset"])
def test_indexable_sources_resume_exactly(source: str) -> None:
    """A list, an array or a Dataset resumes after batch k like any dataset kind."""
    config = {"loader": {"kind": "torch", "batch_size": 2, "shuffle": True}, "prefetch": {"kind": "thread"}}
    config["seed"] = 5
    with loaderfactory.build_loader(config, dataset=SOURCES[source]()) as loader:
        expected = [batch.tolist() for batch in loader]
    with loaderfactory.build_loader(config, dataset=SOURCES[source]()) as loader:
        batches = iter(loader)
        head = [next(batches).tolist() for _ in range(2)]
        state = loader.state_dict()
        batches.close()
    with loaderfactory.build_loader(config, dataset=SOURCES[source]()) as resumed:
        resumed.load_state_dict(state)
        assert head + [batch.tolist() for batch in resumed] == expected


def test_an_iterable_dataset_splits_between_workers() -> None:
    """With worker processes the dataset splits its own stream (get_worker_info), as in torch."""
    config = {"loader": {"kind": "torch", "batch_size": 2, "num_workers": 2}}
    with loaderfactory.build_loader(config, dataset=SplitStream()) as loader:
        assert sorted(_values(loader)) == ITEMS
        with pytest.raises(ResumeError, match=r"^loader \(torch\): an iterable dataset read by worker"):
            loader.state_dict()


class Resumable:
    """A lazy, resumable stage: yields items from a position it can save and restore."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.position = 0
        self.pending: int | None = None

    def __iter__(self) -> Iterator[int]:
        start, self.pending = (self.pending or 0), None
        for index in range(start, self.length):
            self.position = index + 1
            yield index * 10
        self.position = 0

    def __len__(self) -> int:
        return self.length

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.pending = int(state["position"])


def test_a_resumable_iterable_resumes_through_prefetch() -> None:
    """A user's iterable with the state protocol resumes exactly behind a read-ahead prefetch."""
    config = {"loader": {"kind": "torch", "batch_size": 2}, "prefetch": {"kind": "thread", "buffer_size": 3}}
    with loaderfactory.build_loader(config, dataset=Resumable(9)) as loader:
        expected = [batch.tolist() for batch in loader]
        assert len(loader) == 5
    with loaderfactory.build_loader(config, dataset=Resumable(9)) as loader:
        batches = iter(loader)
        head = [next(batches).tolist() for _ in range(2)]
        state = loader.state_dict()
        batches.close()
    with loaderfactory.build_loader(config, dataset=Resumable(9)) as resumed:
        resumed.load_state_dict(state)
        assert head + [batch.tolist() for batch in resumed] == expected


@pytest.mark.parametrize(
    ("dataset", "path", "message"),
    [
        ((i for i in ITEMS), "dataset", "a generator is a one-shot iterator"),
        (42, "dataset", "a int is neither indexable"),
    ],
    ids=["generator", "number"],
)
def test_what_cannot_be_iterated_twice_is_refused(dataset: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        loaderfactory.build_loader({"loader": {"kind": "torch"}}, dataset=dataset)
    assert info.value.paths == [path]


@pytest.mark.parametrize("source", ["iterable_dataset", "reiterable"])
def test_slots_that_need_random_access_refuse_iterables(source: str) -> None:
    """The queue and the sharded loader index their dataset: an iterable is a ConfigError, up front."""
    with pytest.raises(ConfigError, match="the queue loads items by index") as info:
        loaderfactory.build_loader({"queue": {"kind": "ram", "batch_size": 2}}, dataset=SOURCES[source]())
    assert info.value.paths == ["dataset"]
    with pytest.raises(ConfigError, match="sharded needs a map-style dataset") as info:
        loaderfactory.build_loader(
            {"loader": {"kind": "sharded", "batch_size": 2, "distributed": "off"}}, dataset=SOURCES[source]()
        )
    assert info.value.paths == ["loader.kind"]


def test_shuffling_an_iterable_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        loaderfactory.build_loader({"loader": {"kind": "torch", "shuffle": True}}, dataset=Reiterable())
    assert info.value.paths == ["loader.shuffle"]


def test_the_composed_default_config_takes_a_list() -> None:
    """The CLI's config, composed with Hydra, takes a plain list in place of its dataset slot."""
    cfg = loaderfactory.compose(["loader.batch_size=4"])
    with loaderfactory.build_loader(cfg, dataset=[torch.full((2,), i) for i in range(10)]) as loader:
        batches = list(loader)
        assert [b.shape[0] for b in batches] == [4, 4, 2]
        loader.state_dict()
