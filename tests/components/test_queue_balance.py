"""Balanced draws: the queue draws its least drawn held items first, so every item is drawn about
equally often, in both modes, across a restart, and reproducibly with a seed."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.order import epoch_order
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.components.queue.draws import LeastDrawn
from loaderfactory.components.queue.store import Entry

WAIT_S = 10.0
"""Bound on every wait for the workers (a hang becomes a failure)."""


def _gated_draws(seed: int, batch_size: int) -> tuple[np.ndarray[Any, Any], set[int]]:
    """The issue's setting (800 batches from 64 items, mode always, 2 workers, capacity 32, one load
    per two batches): the draws per item, and the numbers of distinct items a batch held."""
    dataset = Gated(64)
    dataset.allow(32)  # the fill
    distinct: set[int] = set()
    with QueueDataset(
        dataset,
        epoch_size=800,
        mode="always",
        num_workers=2,
        capacity=32,
        batch_size=batch_size,
        seed=seed,
        timeout=WAIT_S,
    ) as queue:
        try:
            for number, batch in enumerate(queue):
                distinct.add(len(set(batch["index"].reshape(-1).tolist())))
                if number % 2:
                    _let_one_more_load(queue, dataset, number)
            return queue.sampling_counts, distinct
        finally:
            dataset.open()


def _let_one_more_load(queue: Any, dataset: Any, number: int) -> None:
    """Allow one more load after batch ``number`` and wait until the store has it.

    Workers hand items over in index order, so the item just allowed may wait for the other
    worker's, which the next allow() lets through: one load may lag.
    """
    dataset.allow(1)
    loads = 32 + (number + 1) // 2 - 1
    store = queue._run.store if queue._run is not None else None
    assert store is not None
    with store._cond:  # the store notifies at every put
        assert store._cond.wait_for(lambda: store.loads >= loads, WAIT_S)


def cv(counts: np.ndarray[Any, Any]) -> float:
    """Coefficient of variation of the draws per item: 0 is perfectly even; i.i.d. draws give
    sqrt(63/800) = 0.28 for 800 draws from 64 items."""
    return float(counts.std() / counts.mean())


class Gated:
    """Tiny items that load only when the test lets them, one :meth:`allow` per load.

    So the test, not the machine's speed, sets how many loads happen between draws.
    """

    def __init__(self, length: int) -> None:
        self.length = length
        self._allowed = 0
        self._open = False
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        with self._cond:
            if not self._cond.wait_for(lambda: self._open or self._allowed > 0, WAIT_S):
                raise TimeoutError("the test allowed no more loads")
            self._allowed -= not self._open
        return {"vol": torch.full((2,), float(index)), "index": index}

    def allow(self, loads: int) -> None:
        with self._cond:
            self._allowed += loads
            self._cond.notify_all()

    def open(self) -> None:
        """Let every load through, so that closing the queue never waits on a gated worker."""
        with self._cond:
            self._open = True
            self._cond.notify_all()


def held_entries(counts: list[int]) -> tuple[LeastDrawn, list[Entry]]:
    draws = LeastDrawn(np.asarray(counts, dtype=np.int64), seed=0)
    entries = [Entry(None, index, 1, 0.0) for index in range(len(counts))]
    for entry in entries:
        draws.add(entry)
    return draws, entries


def test_take_draws_the_least_drawn_held_items_and_counts_them() -> None:
    """``take`` returns the entries with the fewest draws so far and adds one to their counts."""
    draws, _ = held_entries([5, 0, 3, 1, 9])
    assert sorted(e.index for e in draws.take(2, held=5)) == [1, 3]
    assert draws.counts.tolist() == [5, 1, 3, 2, 9]
    assert [e.index for e in draws.take(1, held=5)] == [1]  # 1 draw, the least now


def test_take_never_draws_an_item_that_left() -> None:
    """Removed entries are skipped, however few draws they have, and stay out after a compaction."""
    draws, entries = held_entries([0] * 200 + [7])
    for entry in entries[:200]:
        draws.remove(entry)
    assert len(draws._heap) <= 150  # compacted on the way: evicted-but-never-drawn items pile up
    assert [e.index for e in draws.take(3, held=1)] == [200, 200, 200]


def test_a_smaller_queue_than_a_batch_draws_every_item_before_any_twice() -> None:
    """With fewer held items than ``k``, each held item is drawn once before any is drawn again."""
    draws, _ = held_entries([0, 0, 0])
    drawn = Counter(e.index for e in draws.take(7, held=3))
    assert sorted(drawn.values()) == [2, 2, 3]
    assert sorted(draws.counts.tolist()) == [2, 2, 3]


def test_two_copies_of_an_item_share_its_count() -> None:
    """Two held copies of one index (loaded at the end of one pass and the start of the next):
    drawing either counts for both, so that item is not drawn twice as often as the others."""
    draws = LeastDrawn(np.zeros(2, dtype=np.int64), seed=0)
    for index in (0, 0, 1):
        draws.add(Entry(None, index, 1, 0.0))
    for _ in range(30):
        draws.take(1, held=3)
    assert draws.counts.tolist() == [15, 15]


def test_a_batch_holds_distinct_items_while_enough_are_held() -> None:
    """Two held copies of one item are not drawn into the same batch while other items are held,
    and both count for the item."""
    draws = LeastDrawn(np.zeros(3, dtype=np.int64), seed=0)
    for index in (0, 0, 1, 2):
        draws.add(Entry(None, index, 1, 0.0))
    for _ in range(50):
        assert sorted(e.index for e in draws.take(3, held=4)) == [0, 1, 2]
    assert draws.counts.tolist() == [50, 50, 50]


def test_ties_are_broken_at_random_by_the_seed() -> None:
    """Among equally drawn items the order depends on the seed, and only on it."""

    def order(seed: int) -> list[int]:
        draws = LeastDrawn(np.zeros(32, dtype=np.int64), seed=seed)
        for index in range(32):
            draws.add(Entry(None, index, 1, 0.0))
        return [draws.take(1, held=32)[0].index for _ in range(32)]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)) == list(range(32))  # each item once before any twice


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_always_mode_draws_every_item_about_equally_often(seed: int) -> None:
    """The issue's setting: 800 draws from 64 items, mode always, 2 workers, capacity 32, one load
    per two draws; the draws per item vary far less than i.i.d. draws' CV of 0.28."""
    counts, _ = _gated_draws(seed, batch_size=1)
    assert counts.sum() == 800 and counts.min() >= 1
    assert cv(counts) < 0.15, counts  # about 0.05 here; uniform draws gave 0.27-0.33


@pytest.mark.parametrize("seed", [0, 1])
def test_batches_of_four_draw_every_item_about_equally_often(seed: int) -> None:
    """Batch size 4 in the issue's setting (mode always, one load per two draws): over 800 batches
    the draws per item vary as little as with batch size 1, and a batch never holds an item twice.

    With draws outpacing loads the spread falls as the passes loaded grow (items held in fewer
    passes stay behind): 400 batches (3.6 passes) gave a CV of 0.11-0.14, 800 about 0.06."""
    counts, distinct = _gated_draws(seed, batch_size=4)
    assert distinct == {4}  # a batch holds 4 distinct items
    assert counts.sum() == 3200 and counts.min() >= 1
    assert cv(counts) < 0.15, counts


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_onsample_mode_draws_every_item_about_equally_often(worker_type: str) -> None:
    """Mode onsample, 800 draws from 64 items through a queue of 32: every item is drawn 12 or 13
    times give or take one, where uniform draws ranged from about 5 to 20."""
    with QueueDataset(
        SyntheticDataset(64, {"vol": {"shape": [2]}}, seed=0),
        epoch_size=800,
        mode="onsample",
        num_workers=1,
        worker_type=worker_type,  # type: ignore[arg-type]
        capacity=32,
        seed=0,
        timeout=WAIT_S,
    ) as queue:
        list(queue)
        counts = queue.sampling_counts
    assert counts.sum() == 800
    assert cv(counts) < 0.15 and counts.max() - counts.min() <= 3, counts


def test_seeded_onsample_balanced_draws_are_reproducible() -> None:
    """Balanced draws stay reproducible in mode onsample with one worker and a seed."""

    def draws(seed: int) -> list[list[int]]:
        ds = SyntheticDataset(40, {"vol": {"shape": [2]}}, seed=0)
        with QueueDataset(ds, epoch_size=60, capacity=10, batch_size=3, seed=seed) as queue:
            return [batch["index"].tolist() for batch in queue]

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_restored_counts_steer_the_next_draws() -> None:
    """After ``load_state_dict`` (before or during a run) the items drawn least before the restart
    are drawn first, so a resumed run keeps the counts balanced."""
    dataset = SyntheticDataset(8, {"vol": {"shape": [2]}}, seed=0)
    # The two items loaded last, so that the oldest items let out by each draw are others.
    *_, mid, low = epoch_order(8, 0, 0, shuffle=True)
    counts = [5] * 8
    counts[low], counts[mid] = 0, 2
    state = {"draws": 34, "sampling_counts": counts}
    with QueueDataset(dataset, epoch_size=2, capacity=8, seed=0) as queue:
        queue.load_state_dict(state)
        assert [b["index"].item() for b in queue] == [low, low]  # 0 then 1 draws: still the least
    with QueueDataset(dataset, epoch_size=4, capacity=8, seed=0) as queue:
        queue.start()  # a live run: its held items are keyed afresh
        queue.load_state_dict(state)
        assert sorted(b["index"].item() for b in queue) == sorted([low, low, low, mid])
        counts[low], counts[mid] = 3, 3
        assert queue.sampling_counts.tolist() == counts


def test_an_evicted_item_is_freed_at_once() -> None:
    """The draw heap drops evicted entries lazily, but never keeps their items alive: after many
    evictions only the held items (and those in flight) exist, so the RAM budget holds."""
    import gc
    import weakref

    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()

    class Tracked(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __len__(self) -> int:
            return 256

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            tensor = torch.full((16,), float(index))
            alive.add(tensor)
            return {"x": tensor}

    with QueueDataset(Tracked(), mode="always", capacity=8, batch_size=2, num_workers=1, seed=0) as queue:
        queue.start()
        for _ in range(40):  # loads outpace draws: most items are evicted without being drawn
            queue.draw()
            time.sleep(0.005)
        held = len(queue._run.store._entries)  # type: ignore[union-attr]
        assert queue._run.store.evictions > 64  # type: ignore[union-attr]
        gc.collect()
        assert len(alive) <= held + 3  # the held items, one in flight, one waiting to be put
