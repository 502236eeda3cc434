"""The order engine: one order for every kind, exact resume from a position, elastic resume, seeds."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import loaderfactory
from loaderfactory.components.order import batches, epoch_order, rank_count, rank_part
from loaderfactory.components.queue.filler import index_order
from loaderfactory.components.seeding import FIXED_SEED, agreed_seed
from loaderfactory.components.steps import ShardedDataLoader
from loaderfactory.components.torch_loader import ResumableDataLoader

balances = st.sampled_from(["pad", "drop", "uneven"])


def _flat(loader: object) -> list[int]:
    return [int(i) for batch in loader for i in torch.as_tensor(batch).reshape(-1)]  # type: ignore[attr-defined]


def test_the_same_seed_gives_the_same_order_in_every_kind() -> None:
    """torch, sharded and the queue's first pass all follow epoch_order(seed, epoch)."""
    data, seed = list(range(37)), 5
    expected = epoch_order(37, seed, 0, shuffle=True)
    torch_kind = ResumableDataLoader(data, batch_size=1, shuffle=True, seed=seed)  # type: ignore[arg-type]
    with ShardedDataLoader(data, 1, shuffle=True, seed=seed) as sharded:
        assert _flat(torch_kind) == _flat(sharded) == expected
    assert list(itertools.islice(index_order(37, seed), 37)) == expected
    assert sorted(expected) == data and expected != data


def test_the_same_seed_gives_the_same_order_through_configs() -> None:
    """Built from configs, the torch and sharded kinds with one seed yield the same batches."""
    orders = []
    for kind in ("torch", "sharded"):
        config = {"loader": {"kind": kind, "batch_size": 4, "shuffle": True}, "seed": 9}
        with loaderfactory.build_loader(config, dataset=list(range(30))) as loader:
            orders.append([_flat([batch]) for batch in loader])
    assert orders[0] == orders[1]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 120),
    world_size=st.integers(1, 4),
    balance=balances,
    batch_size=st.integers(1, 9),
    steps=st.integers(0, 20),
    seed=st.integers(0, 2**40),
)
def test_resuming_from_a_position_takes_exactly_the_rest(
    n: int, world_size: int, balance: str, batch_size: int, steps: int, seed: int
) -> None:
    """At the same world size, each rank's part from position k*W*B is its unbroken part minus k batches."""
    order = epoch_order(n, seed, 3, shuffle=True)
    start = min(n, steps * world_size * batch_size)
    for rank in range(world_size):
        whole = rank_part(order, rank, world_size, balance, 0)  # type: ignore[arg-type]
        rest = rank_part(order, rank, world_size, balance, start)  # type: ignore[arg-type]
        taken = min(steps, len(batches(whole, batch_size, False)))
        assert batches(rest, batch_size, False) == batches(whole, batch_size, False)[taken:]
        assert len(whole) == rank_count(n, rank, world_size, balance)  # type: ignore[arg-type]


def _delivered(order: Sequence[int], world_size: int, balance: str, start: int, batch_size: int) -> list[int]:
    parts = [rank_part(order, r, world_size, balance, start) for r in range(world_size)]  # type: ignore[arg-type]
    return [i for part in parts for batch in batches(part, batch_size, False) for i in batch]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 150),
    saved_world=st.integers(1, 5),
    new_world=st.integers(1, 5),
    batch_size=st.integers(1, 6),
    steps=st.integers(0, 10),
)
def test_elastic_resume_delivers_every_remaining_sample_once(
    n: int, saved_world: int, new_world: int, batch_size: int, steps: int
) -> None:
    """Saved at W after k steps, resumed at W': what came before and after is every index once (uneven),
    and only pad's repeats beside that (pad)."""
    order = epoch_order(n, 1, 0, shuffle=True)
    position = min(n, steps * saved_world * batch_size)
    before = [
        i
        for r in range(saved_world)
        for batch in batches(rank_part(order, r, saved_world, "uneven"), batch_size, False)[:steps]
        for i in batch
    ]
    after = _delivered(order, new_world, "uneven", position, batch_size)
    assert Counter(before + after) == Counter(range(n))
    padded = _delivered(order, new_world, "pad", position, batch_size)
    assert set(before) | set(padded) == set(range(n))
    assert len(padded) - len(after) < new_world


class Reversed(torch.utils.data.Dataset[int]):
    """A dataset with its own order: backwards, shifted by the epoch."""

    def __init__(self, n: int, broken: bool = False) -> None:
        self.n, self.broken = n, broken

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    def epoch_order(self, seed: int, epoch: int) -> list[int]:
        order = [(self.n - 1 - i + epoch) % self.n for i in range(self.n)]
        return order[:-1] if self.broken else order


def test_a_dataset_with_its_own_order_is_followed_by_every_kind() -> None:
    """An OrderedDataset's epoch_order decides the shuffled order of torch, sharded and the queue."""
    data = Reversed(10)
    expected = data.epoch_order(0, 0)
    torch_kind = ResumableDataLoader(data, batch_size=2, shuffle=True, seed=0)
    with ShardedDataLoader(data, 2, shuffle=True, seed=0) as sharded:
        assert _flat(torch_kind) == _flat(sharded) == expected
    assert list(itertools.islice(index_order(10, 0, data), 20)) == expected + data.epoch_order(0, 1)
    assert isinstance(data, loaderfactory.components.order.OrderedDataset)


def test_an_own_order_that_is_not_a_permutation_is_refused() -> None:
    """epoch_order must return a permutation of range(len): anything else is a ValueError naming it."""
    loader = ResumableDataLoader(Reversed(10, broken=True), batch_size=2, shuffle=True, seed=0)
    with pytest.raises(
        ValueError, match=r"Reversed.epoch_order\(0, 0\) must return a permutation of range\(10\)"
    ):
        list(loader)


def _first_order() -> list[int]:
    with loaderfactory.build_loader(
        {"loader": {"kind": "torch", "batch_size": 5, "shuffle": True}}, dataset=list(range(40))
    ) as loader:
        return [int(i) for batch in loader for i in batch]


def test_seed_everything_makes_the_order_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no seed in the config, Lightning's seed_everything(s) (PL_GLOBAL_SEED) decides the order."""
    from pytorch_lightning import seed_everything

    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # restored after the test
    seed_everything(7, verbose=False)
    first = _first_order()
    torch.manual_seed(1234)  # PL_GLOBAL_SEED wins over torch's generator
    assert _first_order() == first
    seed_everything(8, verbose=False)
    assert _first_order() != first


def test_torch_manual_seed_makes_the_order_reproducible_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alone and without PL_GLOBAL_SEED, the seed is drawn from torch's generator."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    torch.manual_seed(3)
    first = _first_order()
    torch.manual_seed(3)
    assert _first_order() == first


def test_ranks_without_a_process_group_share_a_fixed_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun without a group every rank takes the fixed seed; a bad global seed says so."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert agreed_seed(2) == agreed_seed(1) == FIXED_SEED
    monkeypatch.setenv("PL_GLOBAL_SEED", "seven")
    with pytest.raises(ValueError, match="PL_GLOBAL_SEED='seven' is not an integer"):
        agreed_seed()


def test_queues_on_different_ranks_draw_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank holds a queue of its own: one seed must not make every rank draw the same batches."""
    config = {
        "dataset": {"kind": "synthetic", "length": 32, "fields": {"x": {"shape": [1]}}},
        "queue": {"kind": "ram", "capacity": 32, "batch_size": 4, "epoch_size": 6},
        "seed": 5,
    }

    def draws(rank: int) -> list[list[int]]:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        with loaderfactory.build_loader(config) as loader:
            return [batch["index"].tolist() for batch in loader]

    assert draws(0) == draws(0)
    assert draws(0) != draws(1)
