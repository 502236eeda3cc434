"""Loader.state_dict()/load_state_dict(): a restored loader yields exactly the rest of the run."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import loaderfactory
from loaderfactory.components.state import check_matching
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.errors import ResumeError
from loaderfactory.loader import Loader

EPOCHS = 3
LENGTH = 23
BATCH = 4  # 6 batches per loader pass, the last one short


def _config(workers: int, stream: dict[str, Any] | None, prefetch: dict[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "dataset": {"kind": "synthetic", "length": LENGTH, "fields": {"x": {"shape": [1]}}},
        "loader": {"kind": "torch", "batch_size": BATCH, "shuffle": True, "num_workers": workers},
        "seed": 11,
    }
    if stream is not None:
        config["stream"] = {"kind": "epochs", **stream}
    if prefetch is not None:
        config["prefetch"] = {"kind": "thread", **prefetch}
    return config


def _ids(batch: Any) -> list[int]:
    return batch["index"].tolist()  # type: ignore[no-any-return]


def _reference(config: Any) -> list[list[list[int]]]:
    with loaderfactory.build_loader(config) as loader:
        return [[_ids(b) for b in loader] for _ in range(EPOCHS)]


def _run_to(loader: Loader, reference: list[list[list[int]]], target: tuple[int, int]) -> None:
    """Draw batches until the loader stands at ``target`` (epoch, batches in it), checking each one."""
    for _ in range(EPOCHS + 1):
        if (loader.epoch, loader.batches_in_epoch) == target:
            return
        epoch, start = loader.epoch, loader.batches_in_epoch
        got = []
        for batch in loader:
            got.append(_ids(batch))
            if (loader.epoch, loader.batches_in_epoch) == target:
                break
        assert got == reference[epoch][start : start + len(got)], f"epoch {epoch} from batch {start}"
    raise AssertionError(f"never reached {target}")


def _check_resume(
    config: Any, stops: list[tuple[int, int]], reference: list[list[list[int]]] | None = None
) -> None:
    """Stop at each (epoch, batches) in turn, restoring into a fresh loader; compare with a clean run
    (``reference``, made here unless given)."""
    reference = _reference(config) if reference is None else reference
    state = None
    for target in stops:
        with loaderfactory.build_loader(config) as loader:
            if state is not None:
                loader.load_state_dict(state)
            _run_to(loader, reference, target)
            state = json.loads(json.dumps(loader.state_dict()))
    epoch, index = stops[-1]
    with loaderfactory.build_loader(config) as restored:
        restored.load_state_dict(state)
        assert [_ids(b) for b in restored] == reference[epoch][index:]
        for later in reference[epoch + 1 :]:
            assert [_ids(b) for b in restored] == later


STACKS = {
    "loader": (None, None),
    "stream": ({"epoch_size": 5, "buffer_size": 2}, None),
    "stream+prefetch": ({"epoch_size": 5, "buffer_size": 0}, {"buffer_size": 2}),
    "buffered+echo": ({"buffer_size": 3}, {"buffer_size": 2, "repeats": 2}),
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize(
    "stops",
    [
        pytest.param([(0, 0)], id="batch-0"),
        pytest.param([(0, 3)], id="mid-epoch"),
        pytest.param([(0, -1)], id="last-batch"),
        pytest.param([(1, 0)], id="after-epoch-end"),
        pytest.param([(1, 1), (1, 4)], id="twice-in-one-epoch"),
    ],
)
def test_restored_loader_yields_exactly_the_rest(
    workers: int, stack: str, stops: list[tuple[int, int]]
) -> None:
    """Stopped after any batch and restored into a fresh Loader, it yields exactly what a clean run would."""
    config = _config(workers, *STACKS[stack])
    length, reference = _clean_run(workers, stack)
    stops = [(e, length if i < 0 else i) for e, i in stops]
    _check_resume(config, stops, reference)


@functools.cache
def _clean_run(workers: int, stack: str) -> tuple[int, list[list[list[int]]]]:
    """An epoch's length and the batches of a clean run, once per stack for all of its stops."""
    config = _config(workers, *STACKS[stack])
    with loaderfactory.build_loader(config) as loader:
        length = len(loader)
    return length, _reference(config)


def test_three_slot_stack_from_yaml_overrides_resumes() -> None:
    """loader=torch stream=fixed_epochs prefetch=thread, composed from overrides, resumes exactly."""
    cfg = loaderfactory.compose(
        [
            "loader=torch",
            "stream=fixed_epochs",
            "prefetch=thread",
            f"dataset.length={LENGTH}",
            f"loader.batch_size={BATCH}",
            "loader.shuffle=true",
            "stream.epoch_size=4",
            "seed=5",
        ]
    )
    with loaderfactory.build_loader(cfg) as loader:
        assert list(loader.components) == ["dataset", "loader", "stream", "prefetch"]
    _check_resume(cfg, [(1, 2)])


def test_unseeded_shuffle_records_its_seed() -> None:
    """Shuffling without a seed draws one and saves it, so the restored loader still continues exactly."""
    config = _config(0, None, None)
    del config["seed"]
    with loaderfactory.build_loader(config) as loader:
        it = iter(loader)
        first = [_ids(next(it)) for _ in range(2)]
        state = loader.state_dict()
        rest = [_ids(b) for b in it]
    with loaderfactory.build_loader(config) as restored:
        restored.load_state_dict(state)
        assert [_ids(b) for b in restored] == rest
    assert first


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"loader": {"shuffle": False}}, r"loader.shuffle: saved True, now False"),
        ({"loader": {"batch_size": 5}}, r"loader.batch_size: saved 4, now 5"),
        ({"stream": {"epoch_size": 5}}, r"another config \(stream: saved None"),
    ],
)
def test_state_from_another_config_is_refused(change: dict[str, Any], match: str) -> None:
    """Loading a state into a loader of another config (worker count, batch size, slots) says what differs."""
    config = _config(0, None, None)
    with loaderfactory.build_loader(config) as loader:
        state = loader.state_dict()
    other = _config(0, None, None)
    for slot, values in change.items():
        other[slot] = {**other.get(slot, {"kind": "epochs"}), **values}
    with loaderfactory.build_loader(other) as loader, pytest.raises(ResumeError, match=match):
        loader.load_state_dict(state)


SPEED_ONLY = [
    pytest.param(
        {"prefetch": {"kind": "thread", "buffer_size": 1}, "stream": {"kind": "epochs", "epoch_size": 5}},
        {
            "prefetch": {"kind": "thread", "buffer_size": 4, "timeout": 30},
            "stream": {"kind": "epochs", "epoch_size": 5, "buffer_size": 3, "gated": True},
            "loader": {"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True, "timeout": 30},
        },
        id="torch",
    ),
    pytest.param(
        {"loader": {"kind": "sharded", "num_workers": 0}},
        {"loader": {"kind": "sharded", "num_workers": 2, "worker_type": "thread", "prefetch": 3}},
        id="sharded",
    ),
]


@pytest.mark.parametrize(("saved_with", "loaded_with"), SPEED_ONLY)
def test_settings_that_only_change_speed_may_differ_on_resume(
    saved_with: dict[str, Any], loaded_with: dict[str, Any]
) -> None:
    """Buffer sizes, timeouts, worker counts and prefetch depth may change between save and load."""

    def config(changes: dict[str, Any]) -> dict[str, Any]:
        base = _config(0, None, None)
        for slot, values in changes.items():
            base[slot] = {**base.get(slot, {}), **values}
        if base["loader"]["kind"] == "sharded":
            base["loader"] = {k: v for k, v in base["loader"].items() if k != "drop_last"}
            base["loader"]["distributed"] = "off"
        return base

    reference = _reference(config(saved_with))
    with loaderfactory.build_loader(config(saved_with)) as loader:
        _run_to(loader, reference, (1, 2))
        state = json.loads(json.dumps(loader.state_dict()))
    with loaderfactory.build_loader(config(loaded_with)) as restored:
        restored.load_state_dict(state)
        assert [_ids(b) for b in restored] == reference[1][2:]
        assert [_ids(b) for b in restored] == reference[2]


def test_component_takes_a_state_of_another_worker_count() -> None:
    """The sampler decides a map-style loader's order, so the worker count may change on resume."""
    dataset = list(range(10))
    expected = [b.tolist() for b in ResumableDataLoader(dataset, batch_size=2, shuffle=True, seed=3)]  # type: ignore[arg-type]
    first = ResumableDataLoader(dataset, batch_size=2, shuffle=True, seed=3, num_workers=0)  # type: ignore[arg-type]
    batches = iter(first)
    next(batches)
    saved = first.state_dict()
    other = ResumableDataLoader(dataset, batch_size=2, shuffle=True, seed=3, num_workers=2)  # type: ignore[arg-type]
    other.load_state_dict(saved)
    assert [b.tolist() for b in other] == expected[1:]


def test_component_refuses_another_batch_size() -> None:
    """A torch loader built in code refuses a state saved with another batch size."""
    dataset = list(range(10))
    saved = ResumableDataLoader(dataset, batch_size=2).state_dict()  # type: ignore[arg-type]
    other = ResumableDataLoader(dataset, batch_size=3)  # type: ignore[arg-type]
    with pytest.raises(ResumeError, match=r"batch_size: saved 2, this one has 3"):
        other.load_state_dict(saved)


class _Shards:
    """A minimal sharding stage following the protocol, as the sharded kind will."""

    def __init__(self, upstream: Any, rank: int, world_size: int) -> None:
        self.upstream, self.rank, self.world_size = upstream, rank, world_size

    def __iter__(self) -> Iterator[Any]:
        for number, batch in enumerate(self.upstream):
            if number % self.world_size == self.rank:
                yield batch

    def state_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_matching("loader (shards)", state, {"world_size": self.world_size, "rank": self.rank})


def test_other_world_size_is_refused_through_the_protocol() -> None:
    """A stage that shards refuses a state saved for another world size, with both values."""
    dataset = loaderfactory.components.data.datasets.SyntheticDataset(8)  # type: ignore[attr-defined]
    state = Loader({"dataset": dataset, "loader": _Shards(dataset, 0, 2)}).state_dict()
    with pytest.raises(ResumeError, match=r"world_size: saved 2, this one has 4"):
        Loader({"dataset": dataset, "loader": _Shards(dataset, 0, 4)}).load_state_dict(state)


def test_component_without_the_protocol_is_named() -> None:
    """A slot whose component has no state_dict() makes state_dict() fail naming the slot and type."""
    loader = Loader({"loader": iter([1, 2, 3])})
    with pytest.raises(
        ResumeError, match=r"loader: a list_iterator has no state_dict\(\) or load_state_dict\(\)"
    ):
        loader.state_dict()


@pytest.mark.parametrize("stop", [1, 2, 3, 5])
def test_thread_buffer_resumes_mid_echo(stop: int) -> None:
    """A ThreadBuffer with repeats resumes inside the echoes of one item (standalone: replaying)."""
    reference = list(ThreadBuffer(range(4), repeats=3))
    buffer = ThreadBuffer(range(4), repeats=3)
    it = iter(buffer)
    got = [next(it) for _ in range(stop)]
    state = json.loads(json.dumps(buffer.state_dict()))
    buffer.close()
    restored = ThreadBuffer(range(4), repeats=3)
    restored.load_state_dict(state)
    assert got + list(restored) == reference


def test_state_is_refused_when_it_is_not_a_loader_state() -> None:
    """Passing something other than Loader.state_dict() output is a clear error."""
    with (
        loaderfactory.build_loader(_config(0, None, None)) as loader,
        pytest.raises(ResumeError, match="not a Loader state"),
    ):
        loader.load_state_dict({"epoch": 1})


def test_composed_config_resumes_with_another_buffer_size() -> None:
    """The Hydra path: a state saved with prefetch.buffer_size=1 loads into prefetch.buffer_size=4."""
    overrides = ["dataset.length=20", "loader.batch_size=4", "loader.shuffle=true", "seed=2"]
    with loaderfactory.build_loader(loaderfactory.compose([*overrides, "prefetch.buffer_size=4"])) as loader:
        expected = [_ids(b) for b in loader]
    with loaderfactory.build_loader(loaderfactory.compose([*overrides, "prefetch.buffer_size=1"])) as loader:
        batches = iter(loader)
        head = [_ids(next(batches)) for _ in range(2)]
        state = loader.state_dict()
        batches.close()
    with loaderfactory.build_loader(loaderfactory.compose([*overrides, "prefetch.buffer_size=4"])) as resumed:
        resumed.load_state_dict(state)
        assert head + [_ids(b) for b in resumed] == expected
    other = loaderfactory.compose([*overrides, "loader.batch_size=5"])
    refused = pytest.raises(ResumeError, match=r"loader.batch_size: saved 4, now 5")
    with loaderfactory.build_loader(other) as loader, refused:
        loader.load_state_dict(state)


def test_a_loader_resumed_at_another_world_size_counts_whole_epochs_after_the_resumed_one() -> None:
    """Saved by rank 0 of 2 after 4 of 6 batches, resumed on 1 rank: the resumed epoch counts 8
    (4 taken + 4 left), and once it is over ``len()`` is a whole epoch on 1 rank (12), as it yields."""
    config: dict[str, Any] = {
        "dataset": {"kind": "synthetic", "length": 24},
        "loader": {"kind": "torch", "batch_size": 2, "shuffle": True},
        "seed": 1,
    }
    two = {**config, "loader": {**config["loader"], "distributed": {"rank": 0, "world_size": 2}}}
    with loaderfactory.build_loader(two) as saving:
        batches = iter(saving)
        for _ in range(4):
            next(batches)
        state = saving.state_dict()
        del batches
    with loaderfactory.build_loader(config) as resumed:
        resumed.load_state_dict(state)
        assert (len(resumed), len(list(resumed))) == (8, 4)
        assert len(resumed) == 12
        assert len(list(resumed)) == 12
