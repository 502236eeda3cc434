"""The shards kind's order: shards permuted per epoch, samples mixed within a window of shards, and
``shuffle: true`` on the ``torch``, ``sharded`` and ``queue`` kinds following it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from shards_data import write_tar_shards

from loaderfactory import build_loader
from loaderfactory.shards import ShardsDataset
from loaderfactory.shards.order import window_order

COUNTS = [5, 7, 3, 6, 4, 2]
counts_st = st.lists(st.integers(0, 9), max_size=12)
seed_st = st.integers(0, 2**63 - 1)


def _windows(order: list[int], counts: list[int], window: int) -> list[set[int]]:
    """Cut ``order`` into its windows: each is the samples of the next ``window`` shards to appear.

    Fails when a window's samples do not come as one block (a later window's sample comes first)."""
    shard_of = np.repeat(np.arange(len(counts)), counts)
    windows, position = [], 0
    while position < len(order):
        shards: list[int] = []
        for index in order[position:]:
            if shard_of[index] not in shards:
                if len(shards) == window:
                    break
                shards.append(int(shard_of[index]))
        size = sum(counts[s] for s in shards)
        block = {int(shard_of[i]) for i in order[position : position + size]}
        assert block == set(shards), f"window of shards {shards} is interleaved with others"
        windows.append(set(shards))
        position += size
    return windows


@given(counts_st, seed_st, st.integers(0, 5), st.integers(1, 6))
def test_window_order_is_a_permutation_of_every_sample(
    counts: list[int], seed: int, epoch: int, window: int
) -> None:
    """Every sample of every shard appears exactly once, empty shards included."""
    order = window_order(counts, seed, epoch, window)
    assert sorted(order.tolist()) == list(range(sum(counts)))


@given(st.lists(st.integers(1, 9), min_size=1, max_size=12), seed_st, st.integers(1, 6))
def test_window_order_keeps_each_window_of_shards_together(counts: list[int], seed: int, window: int) -> None:
    """Samples of window w all come before those of window w+1; a window holds ``window`` shards (the
    last one possibly fewer) and every shard is in exactly one window."""
    windows = _windows(window_order(counts, seed, 0, window).tolist(), counts, window)
    assert all(len(w) == window for w in windows[:-1]) and 1 <= len(windows[-1]) <= window
    assert sorted(s for w in windows for s in w) == list(range(len(counts)))


@given(counts_st, seed_st, st.integers(0, 5), st.integers(1, 6))
def test_window_order_is_a_pure_function_of_its_arguments(
    counts: list[int], seed: int, epoch: int, window: int
) -> None:
    """The same arguments give the same order (another process, another world size alike)."""
    assert np.array_equal(
        window_order(counts, seed, epoch, window), window_order(counts, seed, epoch, window)
    )


def test_epochs_and_seeds_give_other_orders_and_shard_orders() -> None:
    """Each epoch and each seed permutes the shards anew."""
    counts = [3] * 20
    first = window_order(counts, 1, 0, 2).tolist()
    assert first != window_order(counts, 1, 1, 2).tolist() != window_order(counts, 2, 0, 2).tolist()
    assert [i // 3 for i in first[::3]] != sorted(i // 3 for i in first[::3])


def test_a_window_of_every_shard_mixes_samples_across_all_of_them() -> None:
    """With one window spanning every shard, neighbours come from different shards as often as in a
    uniform permutation (generous bound), while window 1 keeps each shard's samples together."""
    counts = [50] * 8
    wide = window_order(counts, 3, 0, 8) // 50
    narrow = window_order(counts, 3, 0, 1) // 50
    assert np.mean(wide[1:] != wide[:-1]) > 0.6
    assert np.mean(narrow[1:] != narrow[:-1]) == pytest.approx(7 / 399)


def test_window_must_be_positive() -> None:
    """A window below 1 is refused, naming the value."""
    with pytest.raises(ValueError, match="window must be ≥ 1, got 0"):
        window_order([3], 0, 0, 0)


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    return write_tar_shards(tmp_path, COUNTS)


def _ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def _config(shards: list[str], loader: dict[str, Any], window: int = 2) -> dict[str, Any]:
    dataset = {"kind": "shards", "urls": shards, "shuffle_window": window, "open_shards": window}
    return {"dataset": dataset, "loader": loader, "seed": 7}


@pytest.mark.parametrize("kind", ["torch", "sharded"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_kinds_shuffle_in_the_window_order(shards: list[str], kind: str, num_workers: int) -> None:
    """``shuffle: true`` reads each epoch in ``window_order`` of the run's seed; ``false`` reads in
    stored order."""
    loader = {"kind": kind, "batch_size": 4, "shuffle": True, "num_workers": num_workers}
    with build_loader(_config(shards, loader)) as shuffled:
        epochs = [_ids(shuffled), _ids(shuffled)]
    assert epochs == [window_order(COUNTS, 7, epoch, 2).tolist() for epoch in (0, 1)]
    with build_loader(_config(shards, loader | {"shuffle": False})) as stored:
        assert _ids(stored) == list(range(sum(COUNTS)))


class RecordingShards(ShardsDataset):
    """Remembers the order in which samples were read (the queue's thread workers share it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: list[int] = []

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.read.append(index)
        return super().__getitem__(index)


def test_the_queue_fills_in_the_window_order(shards: list[str]) -> None:
    """The ``ram`` queue loads a pass over the shards in ``window_order`` of its seed."""
    dataset = RecordingShards(shards, shuffle_window=3, open_shards=3)
    total = sum(COUNTS)
    queue = {"kind": "ram", "epoch_size": 2, "batch_size": 4, "capacity": total, "seed": 5}
    with build_loader(
        {"queue": queue, "loader": {"kind": "torch", "batch_size": None}}, dataset=dataset
    ) as run:
        list(run)
    assert dataset.read[:total] == window_order(COUNTS, 5, 0, 3).tolist()
