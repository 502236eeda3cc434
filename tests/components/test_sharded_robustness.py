"""The sharded loader's workers under stress: BaseExceptions, pipes filled both ways, a killed parent."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from process_checks import alive, orphans_after_parent_kill

from loaderfactory.components.steps import ShardedDataLoader, WorkerTraceback

ROOT = Path(__file__).resolve().parents[2]


class RaisesAt:
    """Items are their index; item ``bad`` raises ``error`` (any BaseException)."""

    def __init__(self, error: BaseException, bad: int = 3, length: int = 8) -> None:
        self.error = error
        self.bad = bad
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise self.error
        return index


@pytest.mark.parametrize("worker_type", ["thread", "process"])
@pytest.mark.parametrize(
    "error", [KeyboardInterrupt("ctrl-c in the dataset"), SystemExit("exit in the dataset")]
)
def test_a_base_exception_in_a_worker_reaches_the_consumer_at_once_as_itself(
    worker_type: str, error: BaseException
) -> None:
    """KeyboardInterrupt or SystemExit from the dataset is re-raised in the consumer as itself, promptly."""
    loader = ShardedDataLoader(
        RaisesAt(error), batch_size=1, num_workers=2, worker_type=worker_type, timeout=30
    )
    seen: list[int] = []
    started = time.monotonic()
    with pytest.raises(type(error), match="in the dataset") as info:
        for batch in loader:
            seen.append(int(batch))
    assert time.monotonic() - started < 15  # not after the 30 s stall timeout
    assert seen == [0, 1, 2]
    if worker_type == "process":
        assert isinstance(info.value.__cause__, WorkerTraceback)
        assert "in __getitem__" in str(info.value.__cause__)
    else:
        assert info.value is error
    loader.close()


class Indices:
    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


def big_untensored(items: list[int]) -> tuple[int, np.ndarray]:
    """A batch pickled by value (no shared memory): its first index and 8 bytes per item."""
    return items[0], np.zeros(len(items) * 8, dtype=np.uint8)


def test_steps_and_results_larger_than_a_pipe_buffer_do_not_deadlock() -> None:
    """Steps of 20000 indices sent while workers send back 160 kB pickled batches complete, in order."""
    batch_size = 20_000
    loader = ShardedDataLoader(
        Indices(12 * batch_size), batch_size=batch_size, num_workers=2, collate=big_untensored, timeout=60
    )
    with loader:
        firsts = [first for first, _ in loader]
        assert firsts == [step * batch_size for step in range(12)]
        # An early break with large steps and results still in both pipes stops the workers too.
        for _, payload in loader:
            assert payload.nbytes == 8 * batch_size
            pids = loader.worker_pids
            break
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_exit_soon_after_their_parent_is_killed(context: str) -> None:
    """Worker processes of a parent killed by SIGKILL (which cannot stop them) exit within seconds."""
    code = f"""
import time
from loaderfactory.components.steps import ShardedDataLoader
loader = ShardedDataLoader(
    list(range(100)), batch_size=4, num_workers=2, persistent_workers=True,
    multiprocessing_context={context!r},
)
iterator = iter(loader)
next(iterator)
print(" ".join(map(str, loader.worker_pids)), flush=True)
time.sleep(60)
"""
    assert orphans_after_parent_kill(code) == []


def test_no_thread_outlives_a_loader_closed_mid_epoch() -> None:
    """Closing a loader mid-epoch ends every thread it started (torch's queue feeders included)."""
    before = set(threading.enumerate())
    loader = ShardedDataLoader(Indices(400), batch_size=2, num_workers=2, collate=big_untensored)
    iterator = iter(loader)
    next(iterator)
    assert set(threading.enumerate()) - before  # the index queues' feeder threads, at least
    loader.close()
    deadline = time.monotonic() + 10
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(threading.enumerate()) - before
