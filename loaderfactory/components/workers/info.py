"""What a dataset may ask about the worker running it, in a worker thread or a worker process."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WorkerInfo:
    """The worker running the current task (see :func:`get_worker_info`).

    Attributes:
        id: this worker's number, ``0 <= id < num_workers``.
        num_workers: workers of the pool.
        seed: this worker's seed (a process worker's torch, numpy and ``random`` are seeded with it).
        rank: the data-parallel rank of the loader that owns the pool.
        worker_type: ``"thread"`` or ``"process"``.
    """

    id: int
    num_workers: int
    seed: int
    rank: int
    worker_type: str


_process_info: WorkerInfo | None = None
_thread_info = threading.local()


def get_worker_info() -> WorkerInfo | None:
    """The current loaderfactory worker, or ``None`` in the main process or thread."""
    info = getattr(_thread_info, "info", None)
    return info if info is not None else _process_info


def set_worker_info(info: WorkerInfo | None, *, process: bool = False) -> None:
    """Record the current worker: for this thread, or (``process=True``) for the whole process."""
    global _process_info
    if process:
        _process_info = info
    else:
        _thread_info.info = info


def worker_seed(seed: int, rank: int, worker_id: int, generation: int) -> int:
    """A 63-bit seed, distinct per rank, worker and pool generation."""
    state = np.random.SeedSequence([seed, rank, worker_id, generation]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)
