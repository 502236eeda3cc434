"""``close()`` from another thread while the consumer thread is still starting a pass.

A pass starts its threads or workers while it is being made; a ``close()`` that came then used to see
no pass, return, and leave the one being made running with its consumer waiting forever. ``close()``
now waits for the pass being made and stops it.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import torch
from process_checks import alive

from loaderfactory import Loader, ShardedDataLoader, ThreadBuffer, ThreadDataLoader
from loaderfactory.components.torch_loader import ResumableDataLoader

BOUND_S = 30.0
"""Far longer than a close takes: only a consumer left waiting forever reaches it."""
CLOSER_WAIT_S = 1.0
"""The closer's chance to come first: without the fix it returns at once, with it it waits."""


class GatedStart:
    """Iterating it first waits for ``go`` (having set ``entered``): a pass caught half made."""

    def __init__(self, items: Any) -> None:
        self.items = items
        self.entered = threading.Event()
        self.go = threading.Event()

    def __iter__(self) -> Iterator[Any]:
        self.entered.set()
        assert self.go.wait(BOUND_S)
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Endless:
    """Items for ever: only ``close()`` ends a pass over it."""

    def __iter__(self) -> Iterator[int]:
        count = 0
        while True:
            count += 1
            yield count


class Ids(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"id": torch.tensor([index])}


def live_children() -> set[int]:
    return {p.pid for p in psutil.Process().children() if alive(p.pid)}


def consume(iterable: Any) -> threading.Thread:
    def run() -> None:
        for _ in iterable:
            pass

    thread = threading.Thread(target=run, name="consumer", daemon=True)
    thread.start()
    return thread


def close_while_starting(close: Any, gate: GatedStart, consumer: threading.Thread) -> None:
    """Close while the consumer is inside ``gate``, then let the pass finish starting: the close
    waits for it and stops it, and the consumer's loop ends."""
    assert gate.entered.wait(BOUND_S)

    def close_allowing_a_slow_stop() -> None:
        # On a loaded machine a producer may take longer than the grace to leave; it is then left
        # to finish as a daemon, with a RuntimeWarning: the designed bounded close, not a failure.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "loaderfactory-.* after close", RuntimeWarning)
            close()

    closer = threading.Thread(target=close_allowing_a_slow_stop, name="closer", daemon=True)
    closer.start()
    closer.join(CLOSER_WAIT_S)
    assert closer.is_alive(), "close() returned while a pass was still being made"
    gate.go.set()
    closer.join(BOUND_S)
    consumer.join(BOUND_S)
    assert not closer.is_alive()
    assert not consumer.is_alive(), "the consumer still waits on a pass that close() missed"


def test_a_thread_buffer_closed_while_its_pass_starts_stops_that_pass() -> None:
    gate = GatedStart([])
    gate.items = Endless()
    buffer = ThreadBuffer(gate, buffer_size=2)
    consumer = consume(buffer)
    close_while_starting(buffer.close, gate, consumer)
    assert not [t for t in threading.enumerate() if t.name.startswith("loaderfactory-ThreadBuffer")]


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_loader_closed_while_its_epoch_starts_stops_every_stage(worker_type: str) -> None:
    """The sampler is read while the sharded loader's pass is made, inside the prefetch's pass."""
    gate = GatedStart(range(1_000_000))
    loader = ShardedDataLoader(Ids(), batch_size=2, sampler=gate, num_workers=1, worker_type=worker_type)
    pipeline = Loader({"loader": loader, "prefetch": ThreadBuffer(loader, buffer_size=2)})
    consumer = consume(pipeline)
    close_while_starting(pipeline.close, gate, consumer)
    assert loader.worker_pids == []


def test_a_thread_data_loader_closed_while_its_workers_start_stops_them() -> None:
    """Its workers start on the prefetch thread, which reads the sampler while starting them."""
    before = live_children()
    gate = GatedStart(range(1_000_000))
    loader = ThreadDataLoader(Ids(), batch_size=2, sampler=gate, num_workers=1)
    consumer = consume(loader)
    close_while_starting(loader.close, gate, consumer)
    assert not live_children() - before


def test_a_torch_kind_loader_closed_while_its_workers_start_stops_them() -> None:
    before = live_children()
    gate = GatedStart(range(1_000_000))
    loader = ResumableDataLoader(Ids(), batch_size=2, sampler=gate, num_workers=1)
    pipeline = Loader({"loader": loader, "prefetch": ThreadBuffer(loader, buffer_size=2)})
    consumer = consume(pipeline)
    close_while_starting(pipeline.close, gate, consumer)
    assert not live_children() - before
