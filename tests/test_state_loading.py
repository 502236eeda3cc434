"""Corrupted or mismatched states are refused by ``load_state_dict``: a ``ResumeError`` naming the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from loaderfactory import Loader, build_loader, compose
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.components.state import StateFieldError
from loaderfactory.components.steps.loader import ShardedDataLoader
from loaderfactory.components.stream.wrapper import StreamWrapper
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.errors import ResumeError


class _Drop:
    """The ``DROP`` marker; its repr names it, so test ids are the same in every process (xdist)."""

    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()
"""In a table of changes: remove the key."""


class _Range:
    """A sized ``stream_fn``: each call is a new pass of ``range(n)``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self) -> Iterator[int]:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


COMPONENTS: dict[str, Callable[[], Any]] = {
    # 23 items in batches of 4: 6 batches per epoch.
    "torch": lambda: ResumableDataLoader(list(range(23)), batch_size=4, shuffle=True, seed=1),  # type: ignore[arg-type]
    # 5 items echoed twice: 10 per pass.
    "thread": lambda: ThreadBuffer(range(5), repeats=2, name="prefetch (thread)"),
    # Passes of 5 batches, epochs of 4.
    "stream": lambda: StreamWrapper(_Range(5), epoch_size=4, name="s"),
    # 22 items, rank 0 of 2 takes 11: 2 steps of 4 and a rollover of 3.
    "sharded": lambda: ShardedDataLoader(
        list(range(22)), 4, shuffle=True, last_batch="rollover", seed=1, rank=0, world_size=2
    ),
    # 8 items, 6 batches per epoch.
    "queue": lambda: QueueDataset(
        SyntheticDataset(8, {"vol": {"shape": [2]}}, seed=0), epoch_size=6, capacity=8, seed=0
    ),
}

T, B, S, SH, Q = (
    r"loader \(torch\): ",
    r"prefetch \(thread\): ",
    r"stream 's': ",
    r"loader \(sharded\): ",
    r"queue \(ram\): ",
)

CASES: list[tuple[str, Any, str]] = [
    # -- torch: 6 batches per epoch
    ("torch", None, T + r"a state must be a dict .* got NoneType"),
    ("torch", [], T + r"a state must be a dict .* got list"),
    ("torch", {}, T + r"state field 'epoch' is missing \(so are 'position', 'steps', 'seed'\)"),
    ("torch", {"position": DROP}, T + r"state field 'position' is missing"),
    ("torch", {"position": None}, T + r"state field 'position' must be an int in \[0, 23\], got None"),
    ("torch", {"position": -1}, T + r"state field 'position' must be an int in \[0, 23\], got -1"),
    ("torch", {"position": 24}, T + r"state field 'position' must be an int in \[0, 23\], got 24"),
    ("torch", {"position": 10**12}, T + r"state field 'position' must be an int in \[0, 23\]"),
    ("torch", {"steps": -1}, T + r"state field 'steps' must be an int >= 0, got -1"),
    ("torch", {"position": "2"}, T + r"state field 'position' must be an int .*, got '2'"),
    ("torch", {"position": 2.0}, T + r"state field 'position' must be an int .*, got 2.0"),
    ("torch", {"position": True}, T + r"state field 'position' must be an int .*, got True"),
    ("torch", {"epoch": -1}, T + r"state field 'epoch' must be an int >= 0, got -1"),
    ("torch", {"epoch": None}, T + r"state field 'epoch' must be an int >= 0, got None"),
    ("torch", {"seed": None}, T + r"state field 'seed' must be an int, got None"),
    ("torch", {"shuffle": False}, T + r".*shuffle: saved False, this one has True"),
    ("torch", {"length": 24}, T + r".*length: saved 24, this one has 23"),
    ("torch", {"batch_size": 5}, T + r".*batch_size: saved 5, this one has 4"),
    # -- thread buffer: 10 items per pass (5 echoed twice)
    ("thread", {}, B + r"state field 'consumed' is missing"),
    ("thread", {"consumed": None}, B + r"state field 'consumed' must be an int in \[0, 10\], got None"),
    ("thread", {"consumed": 1.5}, B + r"state field 'consumed' must be an int .*, got 1.5"),
    ("thread", {"consumed": "3"}, B + r"state field 'consumed' must be an int .*, got '3'"),
    ("thread", {"consumed": -1}, B + r"state field 'consumed' must be an int in \[0, 10\], got -1"),
    ("thread", {"consumed": 11}, B + r"state field 'consumed' must be an int in \[0, 10\], got 11"),
    ("thread", {"echoes_done": 2}, B + r"state field 'echoes_done' must be an int in \[0, 1\], got 2"),
    (
        "thread",
        {"consumed": 3, "echoes_done": 0},
        B + r"state field 'echoes_done' must be consumed % repeats = 1, got 0",
    ),
    ("thread", {"repeats": None}, B + r"state field 'repeats' must be an int >= 1, got None"),
    ("thread", {"repeats": 3}, B + r".*repeats: saved 3, this one has 2"),
    # -- stream: epochs of 4, passes of 5
    ("stream", {}, S + r"state field 'epoch' is missing"),
    ("stream", {"epoch": None}, S + r"state field 'epoch' must be an int >= 0, got None"),
    ("stream", {"epoch": -1}, S + r"state field 'epoch' must be an int >= 0, got -1"),
    ("stream", {"in_epoch": 5}, S + r"state field 'in_epoch' must be an int in \[0, 4\], got 5"),
    ("stream", {"in_epoch": "1"}, S + r"state field 'in_epoch' must be an int .*, got '1'"),
    ("stream", {"position": 6}, S + r"state field 'position' must be an int in \[0, 5\], got 6"),
    ("stream", {"position": -2}, S + r"state field 'position' must be an int in \[0, 5\], got -2"),
    ("stream", {"epoch_size": 3}, S + r".*epoch_size: saved 3, this one has 4"),
    # -- sharded: 22 items, 2 steps of 4 per rank (16 positions) and a rollover of 6 an epoch
    ("sharded", {}, SH + r"state field 'epoch' is missing \(so are 'position', 'steps', 'carry', 'seed'\)"),
    ("sharded", None, SH + r"a state must be a dict"),
    ("sharded", {"epoch": None}, SH + r"state field 'epoch' must be an int >= 0, got None"),
    ("sharded", {"epoch": -1}, SH + r"state field 'epoch' must be an int >= 0, got -1"),
    ("sharded", {"position": -1}, SH + r"state field 'position' must be an int in \[0, 22\], got -1"),
    ("sharded", {"position": 99}, SH + r"state field 'position' must be an int in \[0, 22\], got 99"),
    (
        "sharded",
        {"position": 26, "carry": [1, 2, 3]},
        SH + r"state field 'position' must be an int in \[0, 25\], got 26",
    ),
    ("sharded", {"steps": "1"}, SH + r"state field 'steps' must be an int .*, got '1'"),
    ("sharded", {"seed": 2}, SH + r".*seed: saved 2, this one has 1"),
    ("sharded", {"carry": None}, SH + r"state field 'carry' must be a list of at most 7 ints in \[0, 21\]"),
    ("sharded", {"carry": [-1]}, SH + r"state field 'carry' must be .*; entry 0 is -1"),
    ("sharded", {"carry": [5, 22]}, SH + r"state field 'carry' must be .*; entry 1 is 22"),
    ("sharded", {"carry": [1.5]}, SH + r"state field 'carry' must be .*; entry 0 is 1.5"),
    ("sharded", {"carry": list(range(8))}, SH + r"state field 'carry' must be .*, got 8 entries"),
    ("sharded", {"world_size": 0}, SH + r"state field 'world_size' must be an int >= 1, got 0"),
    ("sharded", {"batch_size": 2}, SH + r".*batch_size: saved 2, this one has 4"),
    ("sharded", {"num_shards": 2}, SH + r".*num_shards: saved 2, this one has 1"),
    # -- queue: 6 batches per epoch, 8 items
    ("queue", {}, Q + r"state field 'draws' is missing \(so are 'sampling_counts'\)"),
    ("queue", None, Q + r"a state must be a dict"),
    ("queue", {"draws": None}, Q + r"state field 'draws' must be an int >= 0, got None"),
    ("queue", {"draws": -1}, Q + r"state field 'draws' must be an int >= 0, got -1"),
    (
        "queue",
        {"sampling_counts": None},
        Q + r"state field 'sampling_counts' must be a list of 8 ints >= 0 .*got None",
    ),
    (
        "queue",
        {"sampling_counts": [0] * 7},
        Q + r"state field 'sampling_counts' must be a list of 8 ints .*got 7 entries",
    ),
    (
        "queue",
        {"sampling_counts": [0] * 7 + [-1]},
        Q + r"state field 'sampling_counts' must be .*; entry 7 is -1",
    ),
    (
        "queue",
        {"sampling_counts": [0, 1.5] + [0] * 6},
        Q + r"state field 'sampling_counts' must be .*; entry 1 is 1.5",
    ),
    (
        "queue",
        {"sampling_counts": [None] * 8},
        Q + r"state field 'sampling_counts' must be .*; entry 0 is None",
    ),
    ("queue", {"in_epoch": 7}, Q + r"state field 'in_epoch' must be an int in \[0, 6\], got 7"),
    ("queue", {"in_epoch": -1}, Q + r"state field 'in_epoch' must be an int in \[0, 6\], got -1"),
    ("queue", {"in_epoch": "2"}, Q + r"state field 'in_epoch' must be an int .*, got '2'"),
]


def _corrupt(state: dict[str, Any], change: Any) -> Any:
    """``state`` with ``change`` merged in (``DROP`` removes a key); ``{}`` or a non-dict replaces it."""
    if not isinstance(change, dict) or not change:
        return change
    changed = dict(state)
    for key, value in change.items():
        if value is DROP:
            del changed[key]
        else:
            changed[key] = value
    return changed


@pytest.mark.parametrize(("kind", "change", "match"), CASES, ids=lambda v: repr(v)[:40])
def test_corrupted_component_state_is_refused_naming_the_field(kind: str, change: Any, match: str) -> None:
    """Each component refuses a corrupted state with a ResumeError that names itself and the field."""
    component = COMPONENTS[kind]()
    state = json.loads(json.dumps(component.state_dict()))
    with pytest.raises(ResumeError, match=f"^{match}"):
        component.load_state_dict(_corrupt(state, change))
    assert component.state_dict() == state, "a refused state must leave the component as it was"


@pytest.mark.parametrize("kind", sorted(COMPONENTS))
def test_every_component_takes_its_own_json_state(kind: str) -> None:
    """The validation lets through what state_dict() wrote, after a round trip through JSON."""
    saved = json.loads(json.dumps(COMPONENTS[kind]().state_dict()))
    component = COMPONENTS[kind]()
    component.load_state_dict(saved)
    assert component.state_dict() == saved


def test_field_errors_carry_the_field() -> None:
    """A field's refusal is a StateFieldError (a ResumeError) with owner, field and problem apart."""
    loader = COMPONENTS["torch"]()
    with pytest.raises(StateFieldError) as caught:
        loader.load_state_dict({**loader.state_dict(), "position": -1})
    error = caught.value
    assert (error.owner, error.field) == ("loader (torch)", "position")
    assert error.problem == "must be an int in [0, 23], got -1" and isinstance(error, ValueError)


def test_sharded_mid_epoch_state_with_rollover_resumes() -> None:
    """A state taken mid-epoch with a rollover loads, and the rest of that epoch follows."""
    loader = COMPONENTS["sharded"]()
    list(loader)  # epoch 0 leaves a rollover of 6 (of the epoch, for both ranks)
    reference = [b.tolist() for b in loader]
    again = COMPONENTS["sharded"]()
    list(again)
    batches = iter(again)
    next(batches)
    state = json.loads(json.dumps(again.state_dict()))
    assert state["steps"] == 1 and state["position"] == 8 and len(state["carry"]) == 6
    restored = COMPONENTS["sharded"]()
    restored.load_state_dict(state)
    assert [b.tolist() for b in restored] == reference[1:]


def _queue() -> QueueDataset:
    return QueueDataset(
        SyntheticDataset(8, {"vol": {"shape": [2]}}, seed=0), epoch_size=6, capacity=8, seed=0
    )


def test_queue_resumed_at_batch_2_of_6_yields_the_other_4() -> None:
    """A queue saved after 2 of its 6 batches draws 4 on resuming (len says so), then full epochs."""
    with _queue() as queue:
        batches = iter(queue)
        for _ in range(2):
            next(batches)
        state = json.loads(json.dumps(queue.state_dict()))
        batches.close()  # type: ignore[attr-defined]  # a generator
    assert state["in_epoch"] == 2 and state["draws"] == 2
    with _queue() as restored:
        restored.load_state_dict(state)
        assert restored.state_dict() == state and len(restored) == 6
        assert sum(1 for _ in restored) == 4
        assert restored.state_dict()["in_epoch"] == 0 and len(restored) == 6
        assert sum(1 for _ in restored) == 6


def test_queue_state_saved_before_in_epoch_was_recorded_starts_an_epoch() -> None:
    """A queue state without in_epoch (the counts only) still loads and resumes at an epoch's start."""
    with _queue() as queue:
        queue.load_state_dict({"draws": 3, "sampling_counts": [1, 1, 1, 0, 0, 0, 0, 0]})
        assert len(queue) == 6 and sum(1 for _ in queue) == 6


def test_queue_in_a_loader_resumes_with_the_rest_of_its_epoch() -> None:
    """Through a Loader too, a queue epoch of 6 saved after 2 batches yields the other 4."""
    overrides = [
        "dataset.length=42",
        "dataset.fields.image.shape=[2]",
        "seed=3",
        "~prefetch",
        "queue=ram",
        "queue.epoch_size=6",
        "queue.batch_size=4",
        "queue.capacity=8",
    ]
    with build_loader(compose(overrides)) as loader:
        for seen, _ in enumerate(loader, start=1):
            if seen == 2:
                break
        state = json.loads(json.dumps(loader.state_dict()))
    with build_loader(compose(overrides)) as resumed:
        resumed.load_state_dict(state)
        assert len(resumed) == 6
        assert sum(1 for _ in resumed) == 4
        assert (resumed.epoch, resumed.batches_in_epoch) == (1, 0)
        assert len(resumed) == 6 and sum(1 for _ in resumed) == 6


CONFIG: dict[str, Any] = {
    "dataset": {"kind": "synthetic", "length": 23, "fields": {"x": {"shape": [1]}}},
    "loader": {"kind": "torch", "batch_size": 4, "shuffle": True},
    "stream": {"kind": "epochs", "epoch_size": 5},
    "prefetch": {"kind": "thread", "repeats": 2},
    "seed": 11,
}
"""dataset → torch loader (6 batches) → stream (epochs of 5) → prefetch (echoes of 2)."""

LOADER_CASES: list[tuple[str, Any, str]] = [
    ("slots", DROP, r"^Loader: state field 'slots' is missing"),
    ("epoch", DROP, r"^Loader: state field 'epoch' is missing"),
    ("epoch", None, r"^Loader: state field 'epoch' must be an int >= 0, got None"),
    ("epoch", -1, r"^Loader: state field 'epoch' must be an int >= 0, got -1"),
    ("batches_in_epoch", "3", r"^Loader: state field 'batches_in_epoch' must be an int >= 0, got '3'"),
    ("slots", None, r"^Loader: state field 'slots' must be a dict"),
    ("slots.loader", None, r"^Loader: state field 'slots.loader' must be a dict"),
    ("slots.loader.state", DROP, r"^Loader: state field 'slots.loader.state' is missing"),
    ("slots.loader.state", None, r"^Loader: state field 'slots.loader.state' must be a dict"),
    ("slots.loader.kind", 3, r"^Loader: state field 'slots.loader.kind' must be the slot's kind or null"),
    ("slots.loader.kind", "sharded", r"^loader: the state is of kind 'sharded', this slot is 'torch'"),
    (
        "slots.loader.state.position",
        -1,
        r"^loader \(torch\): state field 'slots.loader.state.position' must be an int in \[0, 23\], got -1",
    ),
    (
        "slots.loader.state.position",
        10**9,
        r"^loader \(torch\): state field 'slots.loader.state.position' must be an int in \[0, 23\]",
    ),
    (
        "slots.loader.state.epoch",
        -1,
        r"^loader \(torch\): state field 'slots.loader.state.epoch' must be an int >= 0",
    ),
    (
        "slots.loader.state.epoch",
        DROP,
        r"^loader \(torch\): state field 'slots.loader.state.epoch' is missing",
    ),
    (
        "slots.loader.state.batch_size",
        2,
        r"^slots.loader.state: loader \(torch\): .*batch_size: saved 2, this one has 4",
    ),
    ("format", "loaderfactory.state/1", r"^the state is a loaderfactory.state/1 state, saved by an older"),
    (
        "slots.stream.state.in_epoch",
        9,
        r"^stream 'stream': state field 'slots.stream.state.in_epoch' must be an int in \[0, 5\], got 9",
    ),
    (
        "slots.prefetch.state.consumed",
        1.5,
        r"^prefetch \(thread\): state field 'slots.prefetch.state.consumed' must be an int >= 0, got 1.5",
    ),
    (
        "slots.prefetch.state.echoes_done",
        None,
        r"^prefetch \(thread\): state field 'slots.prefetch.state.echoes_done'",
    ),
]


def _set(state: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        state = state[key]
    if value is DROP:
        del state[last]
    else:
        state[last] = value


@pytest.mark.parametrize(("path", "value", "match"), LOADER_CASES, ids=lambda v: repr(v)[:40])
def test_corrupted_loader_state_is_refused_at_the_field_path(path: str, value: Any, match: str) -> None:
    """The Loader refuses a corrupted state naming the field by its path in the state, component included."""
    with build_loader(CONFIG) as loader:
        state = json.loads(json.dumps(loader.state_dict()))
    corrupted = copy.deepcopy(state)
    _set(corrupted, path, value)
    with build_loader(CONFIG) as loader:
        with pytest.raises(ResumeError, match=match):
            loader.load_state_dict(corrupted)
        loader.load_state_dict(state)  # the genuine state still loads afterwards


def test_loader_passes_a_refusal_of_a_custom_component_on_with_its_slot() -> None:
    """A user's component that refuses with a plain ResumeError is reported under its slot's path."""

    class Refuses:
        def __iter__(self) -> Iterator[int]:
            return iter([1])

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state: Any) -> None:
            raise ResumeError("mine: no")

    loader = Loader({"loader": Refuses()})
    with pytest.raises(ResumeError, match=r"^slots.loader.state: mine: no$"):
        loader.load_state_dict(loader.state_dict())
