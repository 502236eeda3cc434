"""What fills a :class:`~loaderfactory.components.queue.dataset.QueueDataset`: one background thread.

The thread iterates the shared workers (:mod:`~loaderfactory.components.workers`) over the
per-pass index order and puts each loaded item into the :class:`QueueStore`. The store blocks that
put until there is room in mode ``onsample``, which is what paces loading to the draws there.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

from loaderfactory.components.data.batch_utils import batch_nbytes
from loaderfactory.components.order import epoch_order
from loaderfactory.components.queue.entry import Entry
from loaderfactory.components.queue.store import QueueStore, StoreClosed
from loaderfactory.components.workers.info import worker_seed
from loaderfactory.components.workers.lifecycle import finish_threads, stopping_together
from loaderfactory.components.workers.processes import ProcessWorkers
from loaderfactory.components.workers.threads import ThreadWorkers

Loaded = tuple[int, Any, int]
"""``(index, item, nbytes)``: what a worker hands the filler."""


def index_order(length: int, seed: int, dataset: Any = None) -> Iterator[int]:
    """Dataset indices without end: pass ``n`` is epoch ``n``'s shuffled order of the order engine
    (:func:`~loaderfactory.components.order.epoch_order`), as the loaders shuffle with ``seed``.

    So every item is loaded once per pass before any item is loaded a second time.
    """
    for number in itertools.count():
        yield from epoch_order(length, seed, number, True, dataset)


class LoadItem:
    """The workers' task: ``dataset[index]``, preprocessed, with its size in bytes.

    A failure carries the note ``while loading item {index}``, in a worker thread or process alike,
    and is handed to ``on_failure`` (if given) before it is raised.
    """

    def __init__(
        self,
        dataset: Any,
        preprocess: Callable[[Any], Any] | None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.dataset = dataset
        self.preprocess = preprocess
        self.on_failure = on_failure

    def __call__(self, index: int) -> Loaded:
        try:
            item = self.dataset[index]
            if self.preprocess is not None:
                item = self.preprocess(item)
            return index, item, batch_nbytes(item)
        except BaseException as error:
            error.add_note(f"while loading item {index}")
            if self.on_failure is not None:
                self.on_failure(error)
            raise


def in_flight(mode: str, worker_type: str) -> int:
    """Items each worker holds outside the store at most: two for a process in mode ``always`` (one
    handed over while the next loads), else one."""
    return 2 if mode == "always" and worker_type == "process" else 1


class Filler:
    """Loads items on ``num_workers`` workers and puts them into ``store`` from one daemon thread.

    Costs that thread, the workers (threads, or processes whose items arrive in shared memory) and
    up to one loaded item per worker outside the store (two per worker process in mode always).
    A failure, or a worker process that dies, is recorded in the store as soon as it happens, so
    the next draw raises it. Starts at construction.

    Args:
        store: where the items go; closing it is what stops the filler.
        dataset: a map-style dataset.
        preprocess: applied to each item in the worker.
        num_workers: loading workers, at least 1.
        worker_type: ``"thread"`` or ``"process"``.
        seed: seeds the index order and the workers.
        multiprocessing_context: start method of process workers.
        name: names the threads and appears in errors.
    """

    def __init__(
        self,
        store: QueueStore,
        dataset: Any,
        preprocess: Callable[[Any], Any] | None,
        *,
        num_workers: int,
        worker_type: Literal["thread", "process"],
        seed: int,
        multiprocessing_context: str | None = None,
        name: str = "QueueDataset",
    ) -> None:
        self.store = store
        # A failure must reach the draws at once, not after the items ahead of it in the order
        # (each up to a whole load, hundreds of draws in mode always): a worker thread records it
        # in the store itself, and worker processes hand their results over as they finish.
        self.workers: ThreadWorkers[int, Loaded] | ProcessWorkers[int, Loaded]
        if worker_type == "process":
            # Mode always: two items in flight per worker (outside the budget), one handed over
            # while the next loads. With one, each worker idled for a hand-over per item (a few ms,
            # tens under load): filling 32 items took 0.81 s instead of 0.66 (threads: 0.48).
            # Mode onsample loads one item per draw, and each item in hand delays a failure by a draw.
            self.workers = ProcessWorkers(
                LoadItem(dataset, preprocess),
                num_workers,
                prefetch=in_flight(store.mode, worker_type) * num_workers,
                seed=seed,
                in_order=False,
                multiprocessing_context=multiprocessing_context,
                on_exit=store.fail,  # draws fail at once, while the filler still waits on the dead worker
                name=name,
            )
        else:
            seeds = [worker_seed(seed, 0, i, 0) for i in range(num_workers)]
            task = LoadItem(dataset, preprocess, on_failure=store.fail)
            # One item in flight per worker: items outside the store are not counted in the budget.
            self.workers = ThreadWorkers(task, seeds, window=num_workers, name=name)
        # Worker processes start here, before the filler thread: forking a process that runs
        # threads risks deadlocks (Python 3.12 warns), and the consumer's thread may be the only one.
        results = self.workers.run(index_order(len(dataset), seed, dataset))
        self._thread = threading.Thread(
            target=self._fill, args=(results,), name=f"{name}-filler", daemon=True
        )
        self._thread.start()

    def _fill(self, results: Iterator[Loaded]) -> None:
        try:
            for index, item, nbytes in results:
                self.store.put(Entry(item, index, nbytes, 0.0))
        except StoreClosed:
            pass
        except BaseException as error:  # noqa: BLE001 - forwarded to the consumer, raised at its next draw
            self.store.fail(error)

    @property
    def pids(self) -> list[int]:
        """Process ids of the worker processes (empty for threads)."""
        return self.workers.pids

    def close(self) -> None:
        """Stop loading and join the filler, its workers and their processes; safe to call twice.

        Closing the store ends a put waiting for room; closing the workers ends a wait for a result,
        even one on a worker stuck in ``dataset[i]``. Bounded: the worker threads and the filler
        share one grace (see :mod:`~loaderfactory.components.workers.lifecycle`), and worker
        processes are terminated after theirs.
        """
        self.store.close()
        with stopping_together():
            self.workers.close()
            finish_threads([self._thread], self._thread.name)
