"""The ``torch`` loader kind is the whole ``DataLoader``: its arguments and rules, ``_target_`` helpers."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_forks import cli
from omegaconf import OmegaConf
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

from loaderfactory import ConfigError, build_loader, compose, validate

HERE = __name__
"""This module's import name, for ``_target_`` paths to the helpers below."""

LENGTH = 7
DATA = {"kind": "synthetic", "length": LENGTH, "fields": {"x": {"shape": [1]}}}
SEQUENTIAL = {"_target_": "torch.utils.data.SequentialSampler"}


def torch_config(**loader: Any) -> dict[str, Any]:
    """A config of the small synthetic dataset and a ``torch`` loader with ``loader``'s fields."""
    return {"dataset": DATA, "loader": {"kind": "torch", **loader}}


def ids(batch: Any) -> list[int]:
    return batch["index"].tolist()  # type: ignore[no-any-return]


# --- helpers the configs name by _target_ ----------------------------------------------------------------

SAMPLED: list[Any] = []
"""The data each helper sampler below was given, in the order they were built."""


class ReversedSampler(Sampler[int]):
    """Indices last to first; takes the dataset as ``data_source``, as torch's samplers do."""

    def __init__(self, data_source: Sized) -> None:
        SAMPLED.append(data_source)
        self.length = len(data_source)

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.length - 1, -1, -1))


class EvenSampler(Sampler[int]):
    """The even indices; takes the dataset as ``dataset``."""

    def __init__(self, dataset: Sized) -> None:
        SAMPLED.append(dataset)
        self.length = len(dataset)

    def __len__(self) -> int:
        return len(range(0, self.length, 2))

    def __iter__(self) -> Iterator[int]:
        return iter(range(0, self.length, 2))


class EpochSampler(Sampler[int]):
    """A permutation that is a function of ``(seed, epoch)``; ``set_epoch`` picks the epoch."""

    def __init__(self, data_source: Sized, seed: int = 0) -> None:
        self.length, self.seed, self.epoch = len(data_source), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000 + self.epoch)
        return iter(torch.randperm(self.length, generator=generator).tolist())


def epoch_order(seed: int, epoch: int) -> list[int]:
    """What :class:`EpochSampler` yields for ``epoch``."""
    generator = torch.Generator().manual_seed(seed * 1_000 + epoch)
    return torch.randperm(LENGTH, generator=generator).tolist()  # type: ignore[no-any-return]


def seeded_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def collate_indices(batch: list[dict[str, Any]], offset: int) -> list[int]:
    """A collate_fn with an option, configured by ``_partial_: true``."""
    return [item["index"] + offset for item in batch]


WORKER_TAG: str | None = None
"""Set in each worker process by :func:`init_worker`; the main process keeps ``None``."""


def init_worker(worker_id: int, prefix: str) -> None:
    global WORKER_TAG
    WORKER_TAG = f"{prefix}-{worker_id}"


class TaggedDataset(Dataset[dict[str, Any]]):
    """Items that carry the worker's tag and id, so a test sees that ``worker_init_fn`` ran there."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> dict[str, Any]:
        info = get_worker_info()
        return {"index": index, "tag": WORKER_TAG, "worker": None if info is None else info.id}


class SplitStream(IterableDataset[dict[str, int]]):
    """``range(n)`` as a stream; with workers each reads every ``num_workers``-th item (torch's recipe)."""

    def __init__(self, n: int, split: bool = True) -> None:
        self.n, self.split = n, split

    def __iter__(self) -> Iterator[dict[str, int]]:
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None and self.split else (0, 1)
        for index in range(start, self.n, step):
            yield {"index": index}


# --- batch_size: null -------------------------------------------------------------------------------------


def test_batch_size_null_passes_items_through_unbatched() -> None:
    """``batch_size: null`` yields the dataset's items one by one, as torch's ``batch_size=None``."""
    with build_loader(torch_config(batch_size=None)) as loader:
        items = list(loader)
        assert len(loader) == LENGTH
    assert [item["index"] for item in items] == list(range(LENGTH))
    assert all(isinstance(item["index"], int) and item["x"].shape == (1,) for item in items)


def test_batch_size_null_from_compose() -> None:
    """``loader.batch_size=null`` as an override gives unbatched items through the packaged presets."""
    cfg = compose(["loader.batch_size=null", "dataset.length=5", "~prefetch"])
    assert validate(cfg).loader.batch_size is None
    with build_loader(cfg) as loader:
        items = list(loader)
    assert [item["index"] for item in items] == [0, 1, 2, 3, 4]
    assert items[0]["image"].shape == (3, 32, 32)


def test_batch_size_null_with_a_sampler_follows_the_sampler() -> None:
    """Unbatched items come in the sampler's order, with and without worker processes."""
    for workers in (0, 2):
        config = torch_config(
            batch_size=None, num_workers=workers, sampler={"_target_": f"{HERE}.ReversedSampler"}
        )
        with build_loader(config) as loader:
            assert [item["index"] for item in loader] == list(range(LENGTH - 1, -1, -1))


# --- sampler and batch_sampler by _target_ ----------------------------------------------------------------


def test_sampler_by_target_gets_the_dataset_as_data_source() -> None:
    """A sampler's ``data_source`` (or ``dataset``) argument left out of the config is the dataset itself."""
    SAMPLED.clear()
    with build_loader(torch_config(batch_size=2, sampler={"_target_": f"{HERE}.ReversedSampler"})) as loader:
        assert [ids(b) for b in loader] == [[6, 5], [4, 3], [2, 1], [0]]
        assert len(SAMPLED) == 1
        assert SAMPLED[0] is loader.dataset
    with build_loader(torch_config(batch_size=3, sampler={"_target_": f"{HERE}.EvenSampler"})) as loader:
        assert [ids(b) for b in loader] == [[0, 2, 4], [6]]
        assert SAMPLED[1] is loader.dataset


def test_torch_sequential_sampler_by_target() -> None:
    """torch's own ``SequentialSampler`` is built with the dataset as its ``data_source``."""
    with build_loader(torch_config(batch_size=3, sampler=SEQUENTIAL)) as loader:
        assert [ids(b) for b in loader] == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_data_source_given_in_the_config_is_kept() -> None:
    """The dataset is passed only where the config leaves ``data_source`` out."""
    config = torch_config(batch_size=2, sampler={**SEQUENTIAL, "data_source": ["a", "b", "c"]})
    with build_loader(config) as loader:
        assert [ids(b) for b in loader] == [[0, 1], [2]]


def test_a_dataset_object_reaches_the_sampler_as_it_is() -> None:
    """A list passed as ``build_loader(dataset=...)`` reaches the sampler itself, not an OmegaConf copy."""
    SAMPLED.clear()
    data = [{"index": i} for i in range(5)]
    config = {
        "loader": {"kind": "torch", "batch_size": 2, "sampler": {"_target_": f"{HERE}.ReversedSampler"}}
    }
    with build_loader(config, dataset=data) as loader:
        assert [ids(b) for b in loader] == [[4, 3], [2, 1], [0]]
    assert SAMPLED[0] is data


def test_seeded_random_sampler_from_a_nested_generator_target() -> None:
    """``RandomSampler`` with a seeded generator from a nested ``_target_`` draws that generator's order."""
    sampler = {
        "_target_": "torch.utils.data.RandomSampler",
        "generator": {"_target_": f"{HERE}.seeded_generator", "seed": 3},
    }
    with build_loader(torch_config(batch_size=None, sampler=sampler)) as loader:
        order = [item["index"] for item in loader]
    assert order == torch.randperm(LENGTH, generator=seeded_generator(3)).tolist()


def test_a_user_sampler_with_set_epoch_resumes_exactly() -> None:
    """Loader.state_dict after batch k of epoch 1, loaded into a fresh loader, yields exactly the rest."""
    config = torch_config(batch_size=2, sampler={"_target_": f"{HERE}.EpochSampler", "seed": 4})
    with build_loader(config) as loader:
        reference = [[ids(b) for b in loader] for _ in range(3)]
    assert [[i for batch in epoch for i in batch] for epoch in reference] == [
        epoch_order(4, e) for e in range(3)
    ]
    with build_loader(config) as loader:
        list(loader)
        batches = iter(loader)
        assert [ids(next(batches)), ids(next(batches))] == reference[1][:2]
        state = json.loads(json.dumps(loader.state_dict()))
        del batches
    with build_loader(config) as restored:
        restored.load_state_dict(state)
        assert len(restored) == len(reference[1])  # the whole epoch; the pass yields its rest
        assert [ids(b) for b in restored] == reference[1][2:]
        assert [ids(b) for b in restored] == reference[2]


@pytest.mark.parametrize(
    "sampler",
    [
        {
            "_target_": "torch.utils.data.WeightedRandomSampler",
            "weights": [1.0] * 4 + [5.0] * 3,
            "num_samples": 15,
        },
        {"_target_": "torch.utils.data.RandomSampler", "replacement": True, "num_samples": 15},
    ],
    ids=["weighted", "random"],
)
def test_torchs_random_samplers_resume_exactly(sampler: dict[str, Any]) -> None:
    """A sampler drawing from a ``generator`` attribute gets one seeded by (seed, epoch) per pass, so
    a restored loader draws exactly the batches an unbroken run draws next, epochs after included."""
    config = {**torch_config(batch_size=2, sampler=sampler), "seed": 3}
    with build_loader(config) as loader:
        whole = [ids(b) for b in loader] + [ids(b) for b in loader]
    with build_loader(config) as loader:
        batches = iter(loader)
        head = [ids(next(batches)) for _ in range(3)]
        state = loader.state_dict()
        del batches
    with build_loader(config) as restored:
        restored.load_state_dict(state)
        rest = [ids(b) for b in restored] + [ids(b) for b in restored]
    assert head + rest == whole
    assert whole[:8] != whole[8:]  # each epoch draws anew


def test_set_epoch_reaches_a_user_sampler() -> None:
    """``Loader.set_epoch(e)`` makes the user's sampler yield its order of epoch ``e``."""
    config = torch_config(batch_size=None, sampler={"_target_": f"{HERE}.EpochSampler", "seed": 4})
    with build_loader(config) as loader:
        loader.set_epoch(5)
        assert [item["index"] for item in loader] == epoch_order(4, 5)


def test_batch_sampler_by_target_makes_the_batches() -> None:
    """A ``batch_sampler`` (with ``batch_size: null``) decides every batch and their number."""
    batch_sampler = {
        "_target_": "torch.utils.data.BatchSampler",
        "sampler": [6, 5, 4, 3, 2, 1, 0],
        "batch_size": 3,
        "drop_last": False,
    }
    with build_loader(torch_config(batch_size=None, batch_sampler=batch_sampler)) as loader:
        assert len(loader) == 3
        assert [ids(b) for b in loader] == [[6, 5, 4], [3, 2, 1], [0]]


def test_batch_sampler_without_batch_size_means_batch_size_null() -> None:
    """As with torch's DataLoader(ds, batch_sampler=...), leaving batch_size out is batch_size null."""
    batch_sampler = {"_target_": "torch.utils.data.BatchSampler", "sampler": [3, 1, 2], "batch_size": 2}
    batch_sampler["drop_last"] = False
    with build_loader(torch_config(batch_sampler=batch_sampler)) as loader:
        assert [ids(b) for b in loader] == [[3, 1], [2]]


def test_batch_sampler_from_compose_resumes() -> None:
    """A batch sampler set by overrides builds, and a restored loader yields the batches left."""
    overrides = [
        "dataset.length=7",
        "loader.batch_size=null",
        "+loader.batch_sampler={_target_: torch.utils.data.BatchSampler, sampler: [0, 2, 4, 6, 1, 3, 5],"
        " batch_size: 2, drop_last: true}",
        "~prefetch",
    ]
    with build_loader(compose(overrides)) as loader:
        batches = iter(loader)
        assert ids(next(batches)) == [0, 2]
        state = loader.state_dict()
        del batches
    with build_loader(compose(overrides)) as restored:
        restored.load_state_dict(state)
        assert [ids(b) for b in restored] == [[4, 6], [1, 3]]


# --- torch's rules, each at its field ---------------------------------------------------------------------

BATCHES = {
    "_target_": "torch.utils.data.BatchSampler",
    "sampler": [0, 1],
    "batch_size": 2,
    "drop_last": False,
}

BAD = [
    pytest.param(
        {"batch_sampler": BATCHES, "batch_size": 2},
        ["loader.batch_size"],
        r"batch_sampler makes the batches \(and their order\); set batch_size to null",
        id="batch_sampler_with_batch_size",
    ),
    pytest.param(
        {"batch_sampler": BATCHES, "batch_size": None, "shuffle": True},
        ["loader.shuffle"],
        r"batch_sampler makes the batches .*; set shuffle to false",
        id="batch_sampler_with_shuffle",
    ),
    pytest.param(
        {"batch_sampler": BATCHES, "batch_size": None, "drop_last": True},
        ["loader.drop_last"],
        r"batch_sampler makes the batches .*; set drop_last to false",
        id="batch_sampler_with_drop_last",
    ),
    pytest.param(
        {"batch_sampler": BATCHES, "batch_size": None, "sampler": SEQUENTIAL},
        ["loader.sampler"],
        r"batch_sampler makes the batches .*; drop the sampler",
        id="batch_sampler_with_sampler",
    ),
    pytest.param(
        {
            "batch_sampler": BATCHES,
            "batch_size": 4,
            "shuffle": True,
            "drop_last": True,
            "sampler": SEQUENTIAL,
        },
        ["loader.batch_size", "loader.shuffle", "loader.drop_last", "loader.sampler"],
        r"^4 problems in the config",
        id="batch_sampler_with_everything",
    ),
    pytest.param(
        {"sampler": SEQUENTIAL, "shuffle": True},
        ["loader.shuffle"],
        r"^loader\.shuffle: the sampler gives the order; set shuffle to false",
        id="sampler_with_shuffle",
    ),
    pytest.param(
        {"batch_size": None, "drop_last": True},
        ["loader.drop_last"],
        r"^loader\.drop_last: batch_size null makes no batches to drop; set drop_last to false",
        id="drop_last_without_batches",
    ),
    pytest.param(
        {"worker_init_fn": {"_target_": f"{HERE}.init_worker", "_partial_": True, "prefix": "w"}},
        ["loader.worker_init_fn"],
        r"^loader\.worker_init_fn: needs worker processes, but num_workers is 0",
        id="worker_init_fn_without_workers",
    ),
    pytest.param(
        {"collate": {"kind": "default"}, "collate_fn": {"kind": "default"}},
        ["loader.collate_fn"],
        r"^loader\.collate_fn: names the same field as 'collate'; give only one of them",
        id="collate_and_collate_fn",
    ),
    pytest.param(
        {"pin_memory_device": "cuda"},
        ["loader.pin_memory_device"],
        r"^loader\.pin_memory_device: pins for a device, but pin_memory is false; set pin_memory: true or",
        id="pin_memory_device_without_pin_memory",
    ),
    pytest.param(
        {"sampler": {"_target_": "torch.utils.data.NoSuchSampler"}},
        ["loader.sampler._target_"],
        r"module 'torch.utils.data' has no attribute 'NoSuchSampler'",
        id="sampler_not_importable",
    ),
    pytest.param(
        {
            "sampler": {
                "_target_": "torch.utils.data.RandomSampler",
                "generator": {"_target_": "torch.NoGenerator"},
            }
        },
        ["loader.sampler.generator._target_"],
        r"module 'torch' has no attribute 'NoGenerator'",
        id="nested_generator_not_importable",
    ),
    pytest.param(
        {"num_workers": 1, "worker_init_fn": {"_target_": "no_such_module.init"}},
        ["loader.worker_init_fn._target_"],
        r"cannot import module 'no_such_module'",
        id="worker_init_fn_not_importable",
    ),
]


@pytest.mark.parametrize(("loader", "paths", "match"), BAD)
def test_torch_rules_are_refused_at_their_field(loader: dict[str, Any], paths: list[str], match: str) -> None:
    """What torch's ``DataLoader`` would refuse is a ConfigError at the field to change, before building."""
    with pytest.raises(ConfigError, match=match) as info:
        validate(torch_config(**loader))
    assert info.value.paths == paths
    with pytest.raises(ConfigError) as built:
        build_loader(torch_config(**loader))
    assert built.value.paths == paths


def test_sampler_and_shuffle_from_compose_are_refused_at_shuffle() -> None:
    """The same rule through the packaged presets: ``loader.shuffle`` is the field named."""
    cfg = compose(["+loader.sampler={_target_: torch.utils.data.SequentialSampler}", "loader.shuffle=true"])
    with pytest.raises(ConfigError, match=r"^loader\.shuffle: the sampler gives the order") as info:
        validate(cfg)
    assert info.value.paths == ["loader.shuffle"]


def test_a_queue_slot_refuses_a_sampler() -> None:
    """After a queue, which draws the batches itself, ``loader.sampler`` is refused."""
    config = {**torch_config(sampler=SEQUENTIAL), "queue": {"kind": "ram", "batch_size": 2}}
    with pytest.raises(ConfigError, match=r"^loader\.sampler: the queue draws the batches itself") as info:
        validate(config)
    assert info.value.paths == ["loader.sampler"]
    with pytest.raises(ConfigError) as composed:
        validate(compose(["queue=ram", "+loader.sampler={_target_: torch.utils.data.SequentialSampler}"]))
    assert composed.value.paths == ["loader.sampler"]


# --- worker_init_fn, collate, in_order, pin_memory_device -------------------------------------------------


def test_worker_init_fn_runs_in_each_worker() -> None:
    """``worker_init_fn: {_target_, _partial_: true, ...}`` is called in every worker with its id."""
    config = {
        "dataset": {"_target_": f"{HERE}.TaggedDataset"},
        "loader": {
            "kind": "torch",
            "batch_size": None,
            "num_workers": 2,
            "worker_init_fn": {"_target_": f"{HERE}.init_worker", "_partial_": True, "prefix": "w"},
        },
    }
    with build_loader(config) as loader:
        items = list(loader)
    assert [item["index"] for item in items] == list(range(6))
    assert {item["worker"] for item in items} == {0, 1}
    assert all(item["tag"] == f"w-{item['worker']}" for item in items)
    assert WORKER_TAG is None  # the main process never ran it


def test_worker_init_fn_without_partial_is_a_config_error() -> None:
    """A function called at build time instead of in the workers: the error says to add ``_partial_``."""
    config = torch_config(num_workers=1, worker_init_fn={"_target_": f"{HERE}.init_worker", "prefix": "w"})
    with pytest.raises(ConfigError, match=r"^loader\.worker_init_fn: .*init_worker\(prefix\): ") as info:
        build_loader(config)
    assert info.value.paths == ["loader.worker_init_fn"]
    assert "needs _partial_: true" in str(info.value)


@pytest.mark.parametrize("name", ["collate", "collate_fn"])
def test_collate_by_kind_under_either_name(name: str) -> None:
    """torch's ``collate_fn`` is accepted for ``collate``."""
    config = torch_config(batch_size=3, **{name: {"kind": "dict", "keys": ["index"]}})
    assert validate(config).loader.collate.keys == ["index"]
    with build_loader(config) as loader:
        batches = list(loader)
    assert [set(b) for b in batches] == [{"index"}] * 3
    assert [ids(b) for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("name", ["collate", "collate_fn"])
def test_collate_by_target_with_partial(name: str) -> None:
    """A collate function with options, ``_partial_: true``, collates every batch, in workers too."""
    collate = {"_target_": f"{HERE}.collate_indices", "_partial_": True, "offset": 100}
    for workers in (0, 2):
        with build_loader(torch_config(batch_size=3, num_workers=workers, **{name: collate})) as loader:
            assert list(loader) == [[100, 101, 102], [103, 104, 105], [106]]


def test_collate_by_target_without_partial_names_partial() -> None:
    """Without ``_partial_`` the function would be called at build time: a ConfigError at loader.collate."""
    config = torch_config(collate={"_target_": f"{HERE}.collate_indices", "offset": 1})
    with pytest.raises(ConfigError, match=r"^loader\.collate: .*collate_indices\(offset\): ") as info:
        build_loader(config)
    assert info.value.paths == ["loader.collate"]
    assert "missing 1 required positional argument: 'batch'" in str(info.value)
    assert "needs _partial_: true" in str(info.value)


def test_in_order_false_with_workers_yields_every_item_once() -> None:
    """``in_order: false`` reaches torch, and two workers still deliver each item exactly once."""
    config = {
        "dataset": {**DATA, "length": 20},
        "loader": {"kind": "torch", "batch_size": 3, "num_workers": 2, "in_order": False},
    }
    with build_loader(config) as loader:
        assert loader["loader"].in_order is False
        delivered = [i for batch in loader for i in ids(batch)]
    assert sorted(delivered) == list(range(20))


def test_pin_memory_device_with_pin_memory_is_accepted() -> None:
    """``pin_memory_device`` with ``pin_memory: true`` validates, and loads (pinning is a no-op on CPU)."""
    config = torch_config(batch_size=4, pin_memory=True, pin_memory_device="cuda")
    assert validate(config).loader.pin_memory_device == "cuda"
    with build_loader(config) as loader:
        assert [ids(b) for b in loader] == [[0, 1, 2, 3], [4, 5, 6]]


# --- IterableDataset with workers --------------------------------------------------------------------------


def test_iterable_dataset_split_with_get_worker_info_yields_each_item_once() -> None:
    """A stream that splits itself by ``get_worker_info()`` is read once in all by two workers."""
    config = {"loader": {"kind": "torch", "batch_size": 2, "num_workers": 2}}
    with build_loader(config, dataset=SplitStream(9)) as loader:
        delivered = [i for batch in loader for i in ids(batch)]
    assert sorted(delivered) == list(range(9))


class OneEndsFirst(IterableDataset[dict[str, int]]):
    """Worker 0 yields one item; worker 1 yields its first, then the rest only once worker 0's
    process has exited (torch let it go: its stream ended), whose pid it finds in ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __iter__(self) -> Iterator[dict[str, int]]:
        info = get_worker_info()
        assert info is not None
        marker = os.path.join(self.folder, "worker0.pid")
        if info.id == 0:
            with open(marker + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            yield {"index": 0}
            return
        yield {"index": 1}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until worker 0 is gone: a condition, polled
            if os.path.exists(marker) and not os.path.exists(f"/proc/{Path(marker).read_text()}"):
                break
            time.sleep(0.01)
        else:
            raise TimeoutError("worker 0 did not exit")
        yield from ({"index": index} for index in range(2, 6))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="looks for the exited worker in /proc")
def test_a_worker_whose_stream_ended_exits_while_the_others_go_on(tmp_path: Path) -> None:
    """torch lets a worker whose part of a stream ended exit with code 0 mid-epoch: no worker error,
    and every item of the other worker still arrives."""
    config = {"loader": {"kind": "torch", "batch_size": None, "num_workers": 2}}
    with build_loader(config, dataset=OneEndsFirst(str(tmp_path))) as loader:
        delivered = sorted(item["index"] for item in loader)
    assert delivered == list(range(6))


def test_iterable_dataset_that_does_not_split_is_read_by_every_worker() -> None:
    """As in torch, a stream that ignores ``get_worker_info()`` is read whole by each worker."""
    config = {"dataset": {"_target_": f"{HERE}.SplitStream", "n": 4, "split": False}}
    config["loader"] = {"kind": "torch", "batch_size": None, "num_workers": 2}
    with build_loader(config) as loader:
        delivered = [item["index"] for item in loader]
    assert sorted(delivered) == [0, 0, 1, 1, 2, 2, 3, 3]


# --- errors from the user's root, and the command line ------------------------------------------------------


def test_build_errors_name_the_path_from_the_users_root() -> None:
    """``build_loader(cfg.data)``: a sampler's wrong argument is reported at ``data.loader.sampler``."""
    cfg = OmegaConf.create(
        {"data": torch_config(sampler={"_target_": "torch.utils.data.BatchSampler", "batch_size": 2})}
    )
    with pytest.raises(
        ConfigError, match=r"^data\.loader\.sampler: torch\.utils\.data\.BatchSampler\("
    ) as info:
        build_loader(cfg.data)
    assert info.value.paths == ["data.loader.sampler"]
    assert "missing 2 required positional arguments: 'sampler' and 'drop_last'" in str(info.value)
    bad = OmegaConf.create({"data": torch_config(batch_size=None, drop_last=True)})
    with pytest.raises(ConfigError) as validation:
        build_loader(bad.data)
    assert validation.value.paths == ["data.loader.drop_last"]


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_cli_validates_torch_overrides(tmp_path: Path) -> None:
    """``run.mode=validate`` accepts a sampler by ``_target_`` with ``batch_size=null`` and exits 0."""
    result = cli(
        tmp_path,
        "run.mode=validate",
        "loader.batch_size=null",
        "+loader.sampler={_target_: torch.utils.data.SequentialSampler}",
    )
    assert result.returncode == 0, result.stderr
    assert "config OK" in result.stdout


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_cli_names_each_broken_torch_rule(tmp_path: Path) -> None:
    """A bad torch config exits 2 naming each field: shuffle beside a sampler, drop_last unbatched."""
    result = cli(
        tmp_path,
        "run.mode=validate",
        "loader.batch_size=null",
        "loader.drop_last=true",
        "loader.shuffle=true",
        "+loader.sampler={_target_: torch.utils.data.SequentialSampler}",
    )
    assert result.returncode == 2, result.stderr
    assert "2 problems in the config" in result.stderr
    assert "loader.shuffle: the sampler gives the order; set shuffle to false" in result.stderr
    assert "loader.drop_last: batch_size null makes no batches to drop" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_cli_names_a_sampler_that_cannot_be_imported(tmp_path: Path) -> None:
    """A ``_target_`` that is not there exits 2 at ``loader.sampler._target_``."""
    result = cli(tmp_path, "run.mode=validate", "+loader.sampler={_target_: torch.utils.data.NoSuchSampler}")
    assert result.returncode == 2, result.stderr
    assert (
        "loader.sampler._target_: module 'torch.utils.data' has no attribute 'NoSuchSampler'" in result.stderr
    )


def test_a_temporary_folder_too_long_for_worker_sockets_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch passes a worker's tensors over Unix sockets made in the temporary folder; one whose
    sockets would be too long is refused before any worker starts, saying what to set, instead of
    the consumer waiting forever for a batch the worker failed to send."""
    folder = tmp_path / ("x" * 90)
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setitem(multiprocessing.current_process()._config, "tempdir", None)
    config = {"dataset": {"kind": "synthetic", "length": 8}, "loader": {"kind": "torch", "batch_size": 4}}
    config["loader"]["num_workers"] = 2
    with build_loader(config) as loader, pytest.raises(OSError, match="set TMPDIR to a shorter"):
        next(iter(loader))
    config["loader"]["num_workers"] = 0
    with build_loader(config) as loader:
        assert len(list(loader)) == 2
