"""QueueDataset failures: worker exceptions, killed workers, early break and close leave nothing behind."""

from __future__ import annotations

import os
import signal
import time
import traceback
from typing import Any

import psutil
import pytest
from process_checks import orphans_after_parent_kill

from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.components.workers.remote import WorkerTraceback
from loaderfactory.errors import WorkerError

FIELDS = {"vol": {"shape": [8], "dtype": "float32"}}


class BadItemError(Exception):
    """A dataset's own exception type, to check it arrives as itself."""


class FailsAt(SyntheticDataset):
    def __init__(self, bad: int, delay_ms: float = 0.0) -> None:
        super().__init__(16, FIELDS, delay_ms=delay_ms)
        self.bad = bad

    def __getitem__(self, index: int) -> Any:
        if index == self.bad:
            raise BadItemError(f"cannot read item {index}")
        return super().__getitem__(index)


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_worker_exception_reaches_the_consumer_with_its_type_and_item(worker_type: str) -> None:
    """A dataset error in a worker is raised at the next draw as the same type, naming the item index."""
    # An epoch far longer than loading 16 items takes: the draws cannot run out before item 5 fails
    # (1000 draws from the first items loaded could, with slow-starting worker processes).
    q = QueueDataset(
        FailsAt(bad=5), epoch_size=10**6, worker_type=worker_type, mode="always", wait_fill=False, seed=0
    )
    with pytest.raises(BadItemError, match="cannot read item 5") as info:
        for _ in q:
            pass
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "while loading item 5" in notes
    if worker_type == "thread":
        frames = "".join(traceback.format_tb(info.value.__traceback__))
        assert "in __getitem__" in frames  # the original traceback, from the dataset's own frame
    else:
        assert isinstance(info.value.__cause__, WorkerTraceback)
        assert "in __getitem__" in info.value.__cause__.text
        assert "pid" in notes


def test_preprocess_exception_reaches_the_consumer() -> None:
    """A failing preprocess transform in the worker surfaces like a dataset error."""

    def preprocess(item: Any) -> Any:
        raise KeyError("no such key: 'vol2'")

    q = QueueDataset(SyntheticDataset(8, FIELDS), preprocess=preprocess, wait_fill=False, seed=0)
    with pytest.raises(KeyError, match="vol2"):
        next(iter(q))
    q.close()


def test_unpicklable_exception_from_a_process_keeps_its_type() -> None:
    """An exception that does not pickle is re-created from its type name with the remote traceback."""

    class Odd(SyntheticDataset):
        def __getitem__(self, index: int) -> Any:
            error = ValueError("odd item")
            error.handle = lambda: None  # type: ignore[attr-defined]  # makes it unpicklable
            raise error

    q = QueueDataset(Odd(4, FIELDS), worker_type="process", wait_fill=False, seed=0)
    with pytest.raises(ValueError, match="odd item") as info:
        next(iter(q))
    assert isinstance(info.value.__cause__, WorkerTraceback)
    q.close()


def test_killed_worker_process_is_reported_with_its_pid_within_seconds() -> None:
    """SIGKILL on a worker process ends drawing with a WorkerError naming its pid, not a stale queue."""
    q = QueueDataset(
        SyntheticDataset(64, FIELDS, delay_ms=5),
        epoch_size=10**6,
        mode="always",
        num_workers=2,
        worker_type="process",
        wait_fill=4,
        seed=0,
    )
    before = {p.pid for p in psutil.Process().children()}
    iterator = iter(q)
    next(iterator)
    victim = min(p.pid for p in psutil.Process().children() if p.pid not in before)
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(WorkerError, match=rf"pid {victim}\) was killed by signal SIGKILL"):
        for _ in iterator:
            time.sleep(0.001)
    assert time.monotonic() - killed < 5.0


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_early_break_stops_every_worker(worker_type: str) -> None:
    """Breaking out of an epoch stops the workers and drops the queue (the fixture checks for leftovers)."""
    q = QueueDataset(
        SyntheticDataset(32, FIELDS, delay_ms=1),
        epoch_size=100,
        num_workers=2,
        worker_type=worker_type,
        seed=0,
    )
    for i, _ in enumerate(q):
        if i == 3:
            break
    assert q.qsize == 0
    assert len(list(q)) == 100  # a new epoch starts a fresh queue
    q.close()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_close_is_idempotent_and_frees_shared_memory(worker_type: str) -> None:
    """``close()`` twice is fine; no process, thread or /dev/shm segment survives it."""
    before = {p.pid for p in psutil.Process().children()}
    q = QueueDataset(
        SyntheticDataset(32, FIELDS), num_workers=2, worker_type=worker_type, mode="always", seed=0
    )
    q.start()
    next(iter(q))
    q.close()
    q.close()
    assert {p.pid for p in psutil.Process().children()} <= before


def test_abandoned_queue_stops_its_workers_when_collected() -> None:
    """A started queue that is dropped without close() stops its workers when garbage collected."""
    before = {p.pid for p in psutil.Process().children()}
    q = QueueDataset(SyntheticDataset(32, FIELDS), num_workers=2, worker_type="process", seed=0)
    q.start()
    del q
    assert {p.pid for p in psutil.Process().children()} <= before


def test_closing_while_a_worker_is_blocked_on_a_full_queue() -> None:
    """Workers waiting for room (mode onsample) wake up and exit on close."""
    q = QueueDataset(SyntheticDataset(32, FIELDS), capacity=2, num_workers=3, seed=0)
    q.wait_fill_queue()
    q.close()


def test_worker_processes_exit_soon_after_their_parent_is_killed() -> None:
    """Queue worker processes of a parent killed by SIGKILL (which cannot stop them) exit within seconds."""
    code = """
import time
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.queue.dataset import QueueDataset
dataset = SyntheticDataset(16, {"vol": {"shape": [8], "dtype": "float32"}})
q = QueueDataset(dataset, epoch_size=5, num_workers=2, worker_type="process", capacity=4,
                 multiprocessing_context="fork", seed=0)
iterator = iter(q)
next(iterator)
print(" ".join(str(pid) for pid in q._run.filler.pids), flush=True)
time.sleep(60)
"""
    assert orphans_after_parent_kill(code) == []
