"""Waking a thread that waited for a batch, while the workers have filled the result pipe with
batches nobody reads, never blocks the thread that stops them.

Seen under Ctrl-C in the command (1 run in 4 on a busy machine): the prefetch thread was inside
``next()`` when the close began, so the close posts it a wake-up; the thread then left, and the
post blocked forever on a pipe full of 384 KiB batches that no one was left to read.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any

from torch.utils.data import DataLoader, Dataset

from loaderfactory.components.workers.exits import stop_workers
from loaderfactory.components.workers.torch_internals import unregister_pids


class _Big(Dataset[bytes]):
    """Items of 384 KiB sent by value (as small batches are): each one more than a pipe holds."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> bytes:
        return bytes([index]) * 384 * 1024


def _until_full(fd: int, timeout: float) -> None:
    """Return once the pipe behind ``fd`` takes no more bytes; fail past ``timeout``."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + timeout
    while poller.poll(50):
        assert time.monotonic() < deadline, "the workers never filled the result pipe"


def test_stopping_with_a_wake_up_ends_while_the_result_pipe_is_full_and_unread() -> None:
    loader = DataLoader(_Big(), batch_size=None, num_workers=2, prefetch_factor=2)
    iterator: Any = iter(loader)
    unregister_pids(iterator)  # as a watched pass does: its watcher reports deaths, not torch's handler
    assert len(next(iterator)) == 384 * 1024
    _until_full(iterator._worker_result_queue._writer.fileno(), timeout=60)
    stopping = threading.Thread(target=stop_workers, args=(iterator, 1.0, 0.5, True), daemon=True)
    stopping.start()
    stopping.join(timeout=30)
    assert not stopping.is_alive(), "posting the wake-up blocked on the full result pipe"
