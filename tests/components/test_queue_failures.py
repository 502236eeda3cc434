"""QueueDataset failures: worker exceptions, killed workers, early break and close leave nothing behind."""

from __future__ import annotations

import multiprocessing
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


FORK = multiprocessing.get_context("fork")
WAIT_S = 10.0
"""Bound on every wait in the tests below (a hang becomes a failure)."""
STEP_S = 0.02
"""The consumer's training step: without one, draws from a full queue in mode always come faster
than any hand-over between processes."""


class StuckThenFails(SyntheticDataset):
    """Loads ``fine`` items; the next load is stuck until :meth:`release`, and the one after it fails.

    The stuck item comes before the failing ones in the load order, as a slow read on network
    storage would. The state is shared with worker processes (fork) in primitives that a worker
    terminated while waiting on them cannot block (an ``Event`` would block its ``set()``).
    """

    def __init__(self, fine: int) -> None:
        super().__init__(64, FIELDS)
        self.fine = fine
        self.lock = FORK.Lock()
        self.loads = FORK.RawValue("i", 0)
        self.bad = FORK.RawValue("i", -1)
        """The item of the failing load; -1 before it."""
        self.gate = FORK.Semaphore(0)

    def __getitem__(self, index: int) -> Any:
        with self.lock:
            self.loads.value += 1
            number = self.loads.value
        if number == self.fine + 1:
            self.gate.acquire(timeout=WAIT_S)
        if number != self.fine + 2:
            return super().__getitem__(index)
        self.bad.value = index
        raise BadItemError(f"cannot read item {index}")

    def release(self) -> None:
        self.gate.release()


def draws_after_failure(queue: QueueDataset, dataset: StuckThenFails, limit: int = 100) -> tuple[int, Any]:
    """Draws until one raises; returns the draws made after the failing load, and the error
    (``None`` when ``limit`` draws came after it without one). Releases the stuck load at the end."""
    batches = iter(queue)
    after = 0
    try:
        for _ in batches:
            after += dataset.bad.value >= 0
            if after > limit:
                return after, None
            time.sleep(STEP_S)
    except BadItemError as error:
        return after, error
    finally:
        dataset.release()
        batches.close()
    return after, None


@pytest.mark.parametrize("mode", ["onsample", "always"])
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_failed_load_is_raised_within_a_few_draws_behind_a_stuck_one(worker_type: str, mode: str) -> None:
    """A worker's failure reaches the next draws at once, not after the item loading before it in the
    order (which could take hundreds of draws), with its type and the note naming its item."""
    dataset = StuckThenFails(fine=8)
    queue = QueueDataset(
        dataset,
        epoch_size=10**6,
        mode=mode,  # type: ignore[arg-type]  # a Mode from the parameters
        num_workers=2,
        worker_type=worker_type,  # type: ignore[arg-type]
        capacity=4,
        seed=0,
        timeout=WAIT_S,
        multiprocessing_context="fork",
    )
    with queue:
        after, error = draws_after_failure(queue, dataset)
    assert error is not None, f"{after} draws after the failing load, and no error"
    assert after <= 3, f"the error came {after} draws after the failing load"
    assert f"while loading item {dataset.bad.value}" in "".join(getattr(error, "__notes__", []))


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
    assert time.monotonic() - killed < 30.0  # a stale queue draws 10**6 times; 30 s: a busy machine's slack


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
