"""The mixture kind through the loaders: epochs of the length ``stop`` says, every draw counted by
``(source, id)``, workers and resume reading what one process reads, shards on disk and in S3."""

from __future__ import annotations

import copy
import itertools
import math
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from shards_data import id_samples, npy_bytes, tar_bytes, write_tar_shards

from loaderfactory import build_loader
from loaderfactory.errors import ResumeError, ResumeWarning
from loaderfactory.shards import Storage
from loaderfactory.testing.s3 import S3Server

SIZES = {"web": 37, "code": 23, "books": 11}


def synthetic(length: int, seed: int) -> dict[str, Any]:
    return {"kind": "synthetic", "length": length, "seed": seed, "fields": {"x": {"shape": [1]}}}


def mixture(
    stop: Any = "all_exhausted", weights: dict[str, float] | None = None, **more: Any
) -> dict[str, Any]:
    weights = weights or {"web": 5, "code": 3, "books": 2}
    sources = {
        name: {"dataset": synthetic(size, seed), "weight": weights[name]}
        for seed, (name, size) in enumerate(SIZES.items())
    }
    return {"kind": "mixture", "sources": sources, "stop": stop, "source_key": "source", **more}


def config(dataset: dict[str, Any], workers: int = 0, **loader: Any) -> dict[str, Any]:
    return {
        "dataset": dataset,
        "loader": {"kind": "torch", "batch_size": 4, "num_workers": workers, **loader},
    }


def draws(batches: Any) -> Counter[tuple[str, int]]:
    return Counter(
        (source, int(index))
        for batch in batches
        for source, index in zip(batch["source"], batch["index"], strict=True)
    )


def per_source(counted: Counter[tuple[str, int]]) -> dict[str, Counter[int]]:
    split: dict[str, Counter[int]] = {name: Counter() for name in SIZES}
    for (source, index), times in counted.items():
        split[source][index] += times
    return split


def test_all_exhausted_reads_every_source_whole_and_restarts_those_that_ran_out() -> None:
    with build_loader(config(mixture("all_exhausted"))) as loader:
        epoch = per_source(draws(loader))
        length = len(loader.dataset)
    assert sum(sum(c.values()) for c in epoch.values()) == length
    for name, size in SIZES.items():
        assert set(epoch[name]) == set(range(size))  # every sample of every source
        assert max(epoch[name].values()) - min(epoch[name].values()) <= 1  # passes in turn
    assert sum(epoch["code"].values()) == SIZES["code"]  # the last to end (23 / 0.3): one pass exactly


def test_first_exhausted_ends_when_one_source_is_read_whole() -> None:
    with build_loader(config(mixture("first_exhausted"))) as loader:
        epoch = per_source(draws(loader))
        length = len(loader.dataset)
    assert math.isclose(length, SIZES["books"] / 0.2, abs_tol=2)
    assert sorted(epoch["books"].elements()) == list(range(SIZES["books"]))  # each sample once
    assert all(max(c.values()) == 1 for c in epoch.values())


@pytest.mark.parametrize("samples", [7, 200])
def test_an_epoch_of_n_samples_is_n_samples_long(samples: int) -> None:
    with build_loader(config(mixture({"samples": samples}))) as loader:
        assert len(loader.dataset) == samples and len(loader) == math.ceil(samples / 4)
        assert sum(draws(loader).values()) == samples


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_and_epochs_read_what_the_mixture_places(workers: int) -> None:
    """Each epoch's draws are those the mixture places there (read in one process), with or without
    worker processes; the next epoch reads the sources in new orders."""
    with build_loader(config(mixture({"samples": 120}), workers, shuffle=True)) as loader:
        epochs = [draws(loader) for _ in range(2)]
        mixture_dataset = loader.dataset
        placed = []
        for epoch in range(2):
            located = [mixture_dataset.locate(k, epoch=epoch) for k in range(120)]
            placed.append(Counter((mixture_dataset.names[s], i) for s, i in located))
    assert epochs == placed
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_resumed_mid_epoch_the_rest_completes_the_epoch_exactly(workers: int) -> None:
    with build_loader(config(mixture({"samples": 120}), workers, shuffle=True)) as first:
        whole = draws(first)
    with build_loader(config(mixture({"samples": 120}), workers, shuffle=True)) as first:
        head = draws(itertools.islice(iter(first), 7))
        state = first.state_dict()
    with build_loader(config(mixture({"samples": 120}), workers, shuffle=True)) as second:
        second.load_state_dict(state)
        rest = draws(second)
    assert head + rest == whole and sum(head.values()) == 28


def test_the_same_dataset_under_two_names_is_read_in_two_orders() -> None:
    same = synthetic(50, 0)
    dataset = {
        "kind": "mixture",
        "sources": {"a": {"dataset": same}, "b": {"dataset": same}},
        "stop": "all_exhausted",
        "source_key": "source",
    }
    with build_loader(config(dataset, batch_size=100)) as loader:
        (batch,) = list(loader)
    orders = {
        name: [int(i) for s, i in zip(batch["source"], batch["index"], strict=True) if s == name]
        for name in "ab"
    }
    assert sorted(orders["a"]) == sorted(orders["b"]) == list(range(50))
    assert orders["a"] != orders["b"]


def test_weights_left_out_follow_the_sources_sizes() -> None:
    dataset = mixture({"samples": 710})
    for source in dataset["sources"].values():
        del source["weight"]
    with build_loader(config(dataset)) as loader:
        counted = Counter(source for source, _ in draws(loader).elements())
    assert {name: counted[name] for name in SIZES} == {name: size * 10 for name, size in SIZES.items()}


class Failing(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index == 3:
            raise KeyError(f"sample {index} is missing")
        return {"x": torch.zeros(1), "index": torch.tensor(index)}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failing_source_raises_its_own_error_naming_the_source_and_sample(workers: int) -> None:
    dataset = {
        "kind": "mixture",
        "sources": {
            "good": {"dataset": synthetic(10, 0), "weight": 1},
            "flaky": {"dataset": {"_target_": f"{__name__}.Failing"}, "weight": 1},
        },
        "stop": "all_exhausted",
    }
    with build_loader(config(dataset, workers)) as loader, pytest.raises(KeyError) as caught:
        list(loader)
    told = "".join(getattr(caught.value, "__notes__", [])) + str(caught.value)
    assert "mixture source 'flaky', sample(s) 3" in told


def test_a_mixture_of_local_and_s3_shards_reads_every_id(
    s3: S3Server, fsspec_io_thread: None, tmp_path: Path
) -> None:
    write_tar_shards(tmp_path / "local", [9, 7, 8])  # ids 0..23
    prefix = f"mixture-{uuid.uuid4().hex[:8]}/"
    storage = Storage(s3.storage_options)
    for number, first in enumerate((100, 110)):
        storage.write(s3.url(f"{prefix}train-{number:06d}.tar"), tar_bytes(id_samples(first, 10)))
    remote = {"kind": "shards", "urls": s3.url(prefix), "storage_options": s3.storage_options}
    dataset = {
        "kind": "mixture",
        "sources": {
            "disk": {"dataset": {"kind": "shards", "urls": f"{tmp_path / 'local'}/"}, "weight": 24},
            "s3": {"dataset": remote, "weight": 20},
        },
        "stop": "all_exhausted",
        "source_key": "source",
    }
    with build_loader(config(dataset, 2)) as loader:
        read = Counter(
            (s, int(i)) for batch in loader for s, i in zip(batch["source"], batch["cls"], strict=True)
        )
    assert read == Counter([("disk", i) for i in range(24)] + [("s3", i) for i in range(100, 120)])


def test_per_source_batches_are_pure_and_their_shares_follow_the_weights() -> None:
    """Every batch comes from one source; sources' batch counts follow the weights; each source's
    samples are read once a pass."""
    dataset = mixture({"samples": 400}, batching="per_source", global_batch=4)
    with build_loader(config(dataset, shuffle=True)) as loader:
        batches = list(loader)
    sources = [set(batch["source"]) for batch in batches]
    assert all(len(one) == 1 for one in sources)
    counted = Counter(next(iter(one)) for one in sources)
    assert {name: counted[name] for name in SIZES} == {"web": 50, "code": 30, "books": 20}
    for name, read in per_source(draws(batches)).items():
        assert max(read.values()) - min(read.values()) <= 1 and set(read) == set(range(SIZES[name]))


def test_a_state_saved_under_another_placement_of_positions_is_refused() -> None:
    """A state saved before positions were placed a chunk at a time (its dataset part has no
    ``placement``) would go on with other draws: refused, saying why; the state of now resumes."""
    with build_loader(config(mixture({"samples": 200}))) as first:
        next(iter(first))
        state = first.state_dict()
    assert state["slots"]["dataset"]["state"] == {"length": 200, "placement": 2}
    old = copy.deepcopy(state)
    del old["slots"]["dataset"]["state"]["placement"]
    with build_loader(config(mixture({"samples": 200}))) as second:
        with pytest.raises(ResumeError, match="placed the mixture's positions another way"):
            second.load_state_dict(old)
        second.load_state_dict(state)
        assert sum(draws(second).values()) == 200 - 4


def test_a_changed_mixture_is_refused_unless_asked_then_resumes_with_a_warning() -> None:
    with build_loader(config(mixture({"samples": 120}))) as first:
        next(iter(first))
        state = first.state_dict()
    reweighted = mixture({"samples": 120})
    reweighted["sources"]["books"]["weight"] = 6
    with build_loader(config(reweighted)) as second, pytest.raises(ResumeError) as caught:
        second.load_state_dict(state)
    assert "dataset.sources.books.weight: saved 2.0, now 6.0" in str(caught.value)
    assert "resume.mixture_changes=true" in str(caught.value)
    with build_loader({**config(reweighted), "resume": {"mixture_changes": True}}) as second:
        with pytest.warns(ResumeWarning, match=r"dataset.sources.books.weight: saved 2.0, now 6.0"):
            second.load_state_dict(state)
        rest = draws(second)
        placed = [second.dataset.locate(k, epoch=0) for k in range(4, 120)]
    assert rest == Counter((second.dataset.names[s], i) for s, i in placed)  # the new mixture's rest


def test_a_source_moved_elsewhere_resumes_with_the_moved_data_warning(tmp_path: Path) -> None:
    for folder in ("old", "new"):
        (tmp_path / folder).mkdir()
        for index in range(6):
            torch.save({"index": index, "x": torch.zeros(1)}, tmp_path / folder / f"{index}.pt")

    def moved(root: str) -> dict[str, Any]:
        dataset = mixture({"samples": 20})
        dataset["sources"]["books"]["dataset"] = {"kind": "tensor_folder", "root": str(tmp_path / root)}
        return config(dataset)

    with build_loader(moved("old")) as first:
        next(iter(first))
        state = first.state_dict()
    with build_loader(moved("new")) as second:
        with pytest.warns(ResumeWarning, match=r"dataset.sources.books.dataset.root: saved .*old"):
            second.load_state_dict(state)
        assert sum(draws(second).values()) == 16


def float_shards(folder: Path, first: int, count: int) -> str:
    """One tar shard of samples whose ``npy`` is a float vector of the id (noise shows on it)."""
    folder.mkdir(parents=True)
    samples = [
        {"__key__": f"s{i:06d}".encode(), "cls": str(i).encode(), "npy": npy_bytes(np.full(3, i, np.float32))}
        for i in range(first, first + count)
    ]
    (folder / "train-000000.tar").write_bytes(tar_bytes(samples))
    return f"{folder}/"


def test_sources_read_the_same_items_and_random_draws_in_workers_and_without(tmp_path: Path) -> None:
    """A mixture inside a mixture, and a shards source with a random transform: each source is told
    the pass it is read in, so worker processes read what the main process reads, epoch after epoch."""
    noisy = {
        "kind": "shards",
        "urls": float_shards(tmp_path / "noisy", 0, 24),
        "transforms": {"kind": "gaussian_noise", "std": 1.0, "apply_on": ["npy"]},
    }
    inner = {
        "kind": "mixture",
        "sources": {
            "low": {"dataset": {"kind": "shards", "urls": float_shards(tmp_path / "low", 100, 10)}},
            "high": {"dataset": {"kind": "shards", "urls": float_shards(tmp_path / "high", 200, 30)}},
        },
        "stop": {"samples": 16},
    }
    dataset = {
        "kind": "mixture",
        "sources": {"noisy": {"dataset": noisy}, "inner": {"dataset": inner}},
        "stop": {"samples": 48},
        "source_key": "source",
    }

    def epochs(workers: int) -> list[list[tuple[str, int, list[float]]]]:
        with build_loader(config(dataset, workers, shuffle=True)) as loader:
            return [
                [
                    (s, int(i), [round(v, 5) for v in x.tolist()])
                    for batch in loader
                    for s, i, x in zip(batch["source"], batch["cls"], batch["npy"], strict=True)
                ]
                for _ in range(2)
            ]

    alone, in_workers = epochs(0), epochs(2)
    assert alone == in_workers
    assert alone[0] != alone[1]  # new passes: new orders and new noise
    noisy_values = [x for s, i, x in alone[0] if s == "noisy"]
    assert all(len(set(x)) == 3 for x in noisy_values)  # the noise was drawn


@pytest.mark.parametrize("epoch", [0, 3])
def test_a_batch_reads_what_its_positions_locate_in_any_order(epoch: int) -> None:
    """``__getitems__`` of positions in any order, across blocks and passes over small sources,
    gives for each position the sample :meth:`locate` names; a position past the end is refused."""
    from loaderfactory.mixture.dataset import MixtureDataset

    sources = {name: [{"id": (name, i)} for i in range(size)] for name, size in SIZES.items()}
    dataset = MixtureDataset(sources, [(0, {"web": 5, "code": 3, "books": 2})], stop=500, block=64)
    dataset.set_epoch(epoch)
    positions = [int(p) for p in np.random.default_rng(epoch).permutation(500)[:300]]
    located = [dataset.locate(p) for p in positions]
    expected = [sources[dataset.names[s]][i] for s, i in located]
    assert dataset.__getitems__(positions) == expected
    assert len({(s, i) for s, i in located}) < len(located)  # sources were read more than once
    with pytest.raises(IndexError, match="mixture position 500 out of range"):
        dataset.__getitems__([3, 500, 4])
