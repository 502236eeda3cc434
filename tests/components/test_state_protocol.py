"""The state protocol: read-ahead stages nest their upstream's state as of what their consumer took."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import loaderfactory
from loaderfactory.components.state import UPSTREAM, ReadsAhead, Snapshots
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.loader import Loader

CONFIG: dict[str, Any] = {
    "dataset": {"kind": "synthetic", "length": 23, "fields": {"x": {"shape": [1]}}},
    "loader": {"kind": "torch", "batch_size": 4, "shuffle": True},
    "stream": {"kind": "epochs", "epoch_size": 5, "buffer_size": 2},
    "prefetch": {"kind": "thread", "buffer_size": 3},
    "seed": 11,
}


def test_thread_buffer_nests_the_upstream_state_of_what_its_consumer_took() -> None:
    """Its thread reads ahead, yet its state holds the upstream as of the last item the consumer took."""
    loader = ResumableDataLoader(list(range(40)), batch_size=2)  # type: ignore[arg-type]
    assert isinstance(loader, Snapshots)
    with ThreadBuffer(loader, buffer_size=4) as buffer:
        assert isinstance(buffer, ReadsAhead)
        buffer.track_upstream(loader)
        batches = iter(buffer)
        for _ in range(3):
            next(batches)
        state = buffer.state_dict()
    assert state["consumed"] == 3
    assert state[UPSTREAM]["steps"] == 3 and state[UPSTREAM]["position"] == 6


def test_loader_state_is_keyed_by_slot_and_nests_nothing() -> None:
    """A read-ahead stage's state nests the slots before it by slot name; the Loader saves them split."""
    with loaderfactory.build_loader(CONFIG) as loader:
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        nested = loader["prefetch"].state_dict()
        saved = loader.state_dict()
        batches.close()  # type: ignore[attr-defined]  # a generator
    assert list(nested[UPSTREAM]) == ["stream"]
    assert list(nested[UPSTREAM]["stream"][UPSTREAM]) == ["dataset", "loader"]
    assert list(saved["slots"]) == ["dataset", "loader", "stream", "prefetch"]
    assert all(UPSTREAM not in entry["state"] for entry in saved["slots"].values())
    assert saved["slots"]["prefetch"]["state"]["consumed"] == 3
    assert saved["slots"]["loader"]["state"] == nested[UPSTREAM]["stream"][UPSTREAM]["loader"]


class _OneAhead:
    """A user's stage that reads one item ahead, following the protocol with ``track_upstream``."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.upstream: Snapshots | None = None
        self.taken = 0
        self.held: Any = None  # the upstream snapshot beside the last item handed out

    def track_upstream(self, upstream: Snapshots | None) -> None:
        self.upstream = upstream

    def __iter__(self) -> Iterator[Any]:
        pulled = []
        for item in self.source:
            pulled.append((item, None if self.upstream is None else self.upstream.state_snapshot()))
            if len(pulled) == 2:
                item, self.held = pulled.pop(0)
                self.taken += 1
                yield item
        for item, snapshot in pulled:
            self.held = snapshot
            self.taken += 1
            yield item
        self.taken = 0

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"taken": self.taken}
        if self.upstream is not None and self.held is not None:
            state[UPSTREAM] = self.upstream.state_from_snapshot(self.held)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.taken = int(state["taken"])


def test_a_read_ahead_stage_of_yours_resumes_exactly_in_a_loader() -> None:
    """A user's stage with track_upstream() gets the slots before it and the Loader resumes exactly."""

    def build() -> Loader:
        torch_loader = ResumableDataLoader(list(range(20)), batch_size=2, shuffle=True, seed=4)  # type: ignore[arg-type]
        return Loader({"loader": torch_loader, "ahead": _OneAhead(torch_loader)})

    whole = [batch.tolist() for batch in build()]
    first = build()
    batches = iter(first)
    head = [next(batches).tolist() for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["slots"]["loader"]["state"]["steps"] == 4  # not 5: the stage had read one ahead
    restored = build()
    restored.load_state_dict(state)
    assert head + [batch.tolist() for batch in restored] == whole
