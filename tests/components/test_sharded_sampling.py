"""The sharded loader's epoch plans: rank assignment, steps, shards and rollover (pure, no workers)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loaderfactory.components.order import permutation as epoch_permutation
from loaderfactory.components.order import rank_count as rank_size
from loaderfactory.components.order import rank_part as assign_shards
from loaderfactory.components.steps import ShardPlanner, count_steps, cut_steps

lengths = st.integers(min_value=1, max_value=300)
world_sizes = st.integers(min_value=1, max_value=4)
balances = st.sampled_from(["pad", "drop", "uneven"])
last_batches = st.sampled_from(["keep", "discard", "rollover"])


def _flat(steps: list) -> list[int]:
    out: list[int] = []
    for step in steps:
        if step and isinstance(step[0], list):
            for shard in step:
                out += shard
        else:
            out += step
    return out


@settings(max_examples=200, deadline=None)
@given(
    n=lengths, world_size=world_sizes, balance=balances, seed=st.integers(0, 2**32), epoch=st.integers(0, 50)
)
def test_ranks_are_disjoint_and_cover_the_dataset(
    n: int, world_size: int, balance: str, seed: int, epoch: int
) -> None:
    """Ranks' index sets never overlap and together cover the dataset (drop skips fewer than world_size)."""
    order = epoch_permutation(n, seed, epoch)
    parts = [assign_shards(order, r, world_size, balance) for r in range(world_size)]  # type: ignore[arg-type]
    counts = Counter(i for part in parts for i in part)
    if balance == "pad":
        assert set(counts) == set(range(n))
        assert sum(counts.values()) - n < world_size  # only the wrap-around is seen twice
        assert all(c <= 1 + (world_size - 1) // n + 1 for c in counts.values())
    else:
        assert all(c == 1 for c in counts.values())
        missing = n - len(counts)
        assert missing == (n % world_size if balance == "drop" else 0)
    sizes = {len(p) for p in parts}
    if balance != "uneven":
        assert len(sizes) == 1
    assert max(sizes) - min(sizes) <= 1
    assert [rank_size(n, r, world_size, balance) for r in range(world_size)] == [len(p) for p in parts]  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    n=lengths,
    world_size=world_sizes,
    balance=st.sampled_from(["pad", "drop"]),
    batch_size=st.integers(1, 40),
    last_batch=last_batches,
    num_shards=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_every_rank_takes_the_same_steps_each_epoch(
    n: int, world_size: int, balance: str, batch_size: int, last_batch: str, num_shards: int, seed: int
) -> None:
    """With pad or drop, ranks yield equally many steps every epoch, len() predicts it, draws are disjoint."""
    planners = [
        ShardPlanner(
            n,
            batch_size,
            shuffle=True,
            last_batch=last_batch,
            num_shards=num_shards,
            seed=seed,
            rank=r,
            world_size=world_size,
            balance=balance,
        )  # type: ignore[arg-type]
        for r in range(world_size)
    ]
    carries: list[list[int]] = [[] for _ in planners]
    for epoch in range(3):
        plans = [p.plan(epoch, c) for p, c in zip(planners, carries, strict=True)]
        counts = [p.count(len(c)) for p, c in zip(planners, carries, strict=True)]
        assert counts == [len(plan.steps) for plan in plans]
        assert len(set(counts)) == 1
        if last_batch == "rollover" or (balance == "drop" and last_batch == "discard"):
            # Each entry of the epoch's pool (rollover carried in, then the order) is drawn at most
            # once over all ranks; with rollover, what is not drawn is carried.
            pool = Counter(plans[0].carry_in + epoch_permutation(n, seed, epoch))
            drawn = Counter(i for plan in plans for i in _flat(plan.steps))
            if last_batch == "rollover":
                assert drawn + Counter(plans[0].carry_out) == pool
            assert all(drawn[i] <= pool[i] for i in drawn)
        # The rollover is the epoch's, the same on every rank, so any rank's state resumes them all.
        assert all(plan.carry_out == plans[0].carry_out for plan in plans)
        carries = [plan.carry_out for plan in plans]


@settings(max_examples=150, deadline=None)
@given(n=lengths, batch_size=st.integers(1, 40), num_shards=st.integers(1, 4), carry=st.integers(0, 10))
def test_keep_discard_rollover_lose_or_repeat_only_what_they_say(
    n: int, batch_size: int, num_shards: int, carry: int
) -> None:
    """keep yields all (padding shards repeat whole batches); discard drops < a step; rollover carries it."""
    carried = list(range(1000, 1000 + carry))
    indices = list(range(n))
    per_step = batch_size * num_shards
    for mode in ("keep", "discard", "rollover"):
        steps, rollover = cut_steps(indices, carried, batch_size, mode, num_shards)  # type: ignore[arg-type]
        assert len(steps) == count_steps(n, carry, batch_size, mode, num_shards)  # type: ignore[arg-type]
        flat = _flat(steps)
        if num_shards > 1:
            assert all(len(step) == num_shards for step in steps)
        if mode == "keep":
            head = flat[: n + carry]
            assert head == carried + indices
            assert len(flat) - (n + carry) < per_step  # padding fills at most one step
        else:
            assert flat == (carried + indices)[: len(flat)]
            assert len(flat) % per_step == 0
            left = (carry + n) - len(flat)
            assert 0 <= left < per_step
            assert rollover == ((carried + indices)[len(flat) :] if mode == "rollover" else [])


@settings(max_examples=100, deadline=None)
@given(n=lengths, batch_size=st.integers(1, 40), epochs=st.integers(1, 6), seed=st.integers(0, 1000))
def test_rollover_over_epochs_sees_every_index_once_per_epoch(
    n: int, batch_size: int, epochs: int, seed: int
) -> None:
    """Over rollover epochs, what was yielded plus what is still carried is every index once per epoch."""
    planner = ShardPlanner(n, batch_size, shuffle=True, last_batch="rollover", seed=seed)
    carry: list[int] = []
    seen: Counter[int] = Counter()
    for epoch in range(epochs):
        plan = planner.plan(epoch, carry)
        assert all(len(step) == batch_size for step in plan.steps)
        seen.update(_flat(plan.steps))
        carry = plan.carry_out
        assert len(carry) < batch_size
    seen.update(carry)
    assert seen == Counter({i: epochs for i in range(n)})


@given(n=lengths, seed=st.integers(0, 2**32), epoch=st.integers(0, 100))
def test_shuffle_depends_only_on_seed_and_epoch(n: int, seed: int, epoch: int) -> None:
    """The per-epoch order is a permutation reproduced from (seed, epoch) alone, so every rank agrees."""
    order = epoch_permutation(n, seed, epoch)
    assert sorted(order) == list(range(n))
    assert order == epoch_permutation(n, seed, epoch)


def test_next_epoch_shuffles_differently() -> None:
    """Epochs differ in order."""
    assert epoch_permutation(100, 7, 0) != epoch_permutation(100, 7, 1)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_batch_sampler_steps_are_split_between_ranks(world_size: int) -> None:
    """A batch sampler's steps (shard lists included) are dealt to ranks whole, equal in number."""
    steps = [[[i, i + 1], [i + 2]] for i in range(0, 30, 3)]
    planners = [
        ShardPlanner(None, None, batch_sampler=steps, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    plans = [p.plan(0) for p in planners]
    assert len({len(p.steps) for p in plans}) == 1
    assert [p.count() for p in planners] == [len(p.steps) for p in plans]
    dealt = [step for p in plans for step in p.steps]
    assert all(step in steps for step in dealt)
    assert {str(s) for s in dealt} == {str(s) for s in steps}


def test_assign_shards_rejects_a_rank_outside_the_world() -> None:
    """A rank must be below world_size."""
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        assign_shards([1, 2, 3], 2, 2)
