"""Rules that span slots: a ring collate against every batch alive at once, and epochs with no batch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_forks import cli
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import loaderfactory
from loaderfactory import ConfigError, ThreadBuffer
from loaderfactory.components.data.ring_collate import RingCollate
from loaderfactory.components.order import batches, rank_part
from loaderfactory.components.steps.sampling import ShardPlanner
from loaderfactory.config.validation import validate_plain
from loaderfactory.rules import epochs

ROOT = Path(__file__).resolve().parent.parent


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate_plain(config)
    return {p.path: p.message for p in caught.value.problems}


def ring_config(ring_size: int, buffer_size: int, length: int = 400) -> dict[str, Any]:
    return {
        "dataset": {"kind": "synthetic", "length": length, "fields": {"image": {"shape": [8]}}},
        "loader": {"kind": "torch", "batch_size": 4, "collate": {"kind": "ring", "ring_size": ring_size}},
        "prefetch": {"kind": "thread", "buffer_size": buffer_size},
    }


# -- ring collate ------------------------------------------------------------------------------------


def test_the_corrupting_ring_is_refused_before_anything_starts() -> None:
    """ring_size 4 behind a buffer of 4 (the issue's config) is refused, naming every field involved."""
    message = problems_of(ring_config(4, 4))["loader.collate.ring_size"]
    assert message.startswith("must be >= 6: up to 6 batches collated into the ring are alive at once")
    for part in (
        "loader.num_workers=0",
        "prefetch.buffer_size=4: 4 queued + 1 its thread holds",
        "set ring_size: 6",
    ):
        assert part in message
    with pytest.raises(ConfigError, match=r"loader\.collate\.ring_size: must be >= 6"):
        loaderfactory.build_loader(ring_config(4, 4))


@pytest.mark.parametrize(("workers", "ring_size"), [(0, 6), (2, 5)])
def test_a_ring_at_exactly_the_bound_keeps_100_batches_intact(workers: int, ring_size: int) -> None:
    """At the bound (buffer_size + 2 in the loop's thread; 1 + prefetch_factor + 5 // 2 per worker
    process) every one of 100 batches holds the items its ids name and stays equal to its copy
    until the loop's body ends (a batch lives until the next draw: the draw frees its slot), and
    every id comes exactly once."""
    seen: list[int] = []
    config = ring_config(ring_size, 4)
    config["loader"]["num_workers"] = workers
    validate_plain(config)
    config["loader"]["collate"]["ring_size"] = ring_size - 1
    assert f"must be >= {ring_size}:" in problems_of(config)["loader.collate.ring_size"]
    config["loader"]["collate"]["ring_size"] = ring_size
    with loaderfactory.build_loader(config) as loader:
        dataset = loader["dataset"]
        for batch in loader:
            copy = {k: v.clone() for k, v in batch.items()}
            ids = batch["index"].tolist()
            assert len(ids) == 4
            for row, i in enumerate(ids):
                assert torch.equal(batch["image"][row], dataset[i]["image"])
            seen += ids
            assert all(torch.equal(batch[k], copy[k]) for k in copy)  # the producers ran meanwhile
    assert len(seen) == 100 * 4
    assert sorted(seen) == list(range(400))


@pytest.mark.parametrize("ring_size", [5, 6])
def test_the_bound_is_exact_one_buffer_less_overwrites_the_batch_in_your_loop(ring_size: int) -> None:
    """Behind a buffer of 4, once the thread has collated all it can while your loop holds batch 0,
    a ring of 5 has overwritten batch 0 and a ring of 6 (the bound) has not."""
    buffer_size = 4
    data = [{"x": torch.full((3,), float(i))} for i in range(40)]
    collated = [threading.Event() for _ in range(20)]

    def batches() -> Iterator[Any]:
        loader = DataLoader(data, batch_size=2, collate_fn=RingCollate(ring_size))  # type: ignore[arg-type]
        for number, batch in enumerate(loader):
            collated[number].set()
            yield batch

    with ThreadBuffer(batches(), buffer_size=buffer_size) as buffer:
        stream = iter(buffer)
        first = next(stream)
        # The thread queues batches 1-4 and collates batch 5, which then waits for room. (Batch 0's
        # values are known: a copy taken here could already hold batch 5's on a busy machine.)
        assert collated[buffer_size + 1].wait(timeout=30)
        batch_0 = torch.tensor([[0.0] * 3, [1.0] * 3])
        assert torch.equal(first["x"], batch_0) == (ring_size >= buffer_size + 2)
        stream.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("slots", "bound"),
    [
        ({}, 2),
        ({"prefetch": {"kind": "thread", "buffer_size": 1, "repeats": 3}}, 3),  # echoes hold no more
        ({"stream": {"kind": "epochs", "buffer_size": 2}, "prefetch": {"kind": "thread"}}, 6),
        ({"stream": {"kind": "epochs"}}, 2),  # unbuffered: in the consumer's thread
        ({"loader": {"num_workers": 2}}, 3),
        (
            {
                "loader": {"num_workers": 2, "prefetch_factor": 3},
                "prefetch": {"kind": "thread", "buffer_size": 3},
            },
            6,
        ),
        (
            {
                "loader": {"num_workers": 2, "in_order": False},
                "prefetch": {"kind": "thread", "buffer_size": 3},
            },
            7,
        ),
        ({"loader": {"kind": "sharded", "num_shards": 2}, "prefetch": {"kind": "thread"}}, 6),
        ({"loader": {"kind": "sharded", "num_workers": 2}}, 3),
        ({"loader": {"kind": "sharded", "num_workers": 3, "prefetch": 4}, "prefetch": {"kind": "thread"}}, 3),
        ({"loader": {"kind": "sharded", "num_workers": 1, "worker_type": "thread"}}, 3),
        ({"loader": {"kind": "sharded", "num_workers": 2, "worker_type": "thread"}}, 9),
    ],
)
def test_the_ring_bound_counts_every_batch_alive_at_once(slots: dict[str, Any], bound: int) -> None:
    """Each stage adds what it holds: a buffer b + 1, workers their batches ahead, shards per step."""
    loader = {"kind": "torch", "batch_size": 4, **slots.get("loader", {})}
    config: dict[str, Any] = {"dataset": {"kind": "synthetic", "length": 64}, **slots}
    config["loader"] = loader
    if bound > 2:
        loader["collate"] = {"kind": "ring", "ring_size": bound - 1}
        assert problems_of(config)["loader.collate.ring_size"].startswith(f"must be >= {bound}:")
    loader["collate"] = {"kind": "ring", "ring_size": bound}
    validate_plain(config)


def test_a_queue_ring_counts_the_stages_after_it() -> None:
    """The queue collates in the consumer's thread: its ring covers the prefetch buffer and your loop."""
    config = {
        "dataset": {"kind": "synthetic", "length": 64},
        "queue": {"kind": "ram", "batch_size": 4, "capacity": 8, "collate": {"kind": "ring", "ring_size": 3}},
        "loader": {"kind": "torch"},
        "prefetch": {"kind": "thread", "buffer_size": 2},
    }
    assert "must be >= 4" in problems_of(config)["queue.collate.ring_size"]


@pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it
def test_ring_refused_by_validate_and_plan_modes(tmp_path: Path) -> None:
    """`run.mode=validate` and `run.mode=plan` refuse the corrupting config instead of saying it is OK."""
    for mode in ("validate", "plan"):
        ring = ("prefetch=thread", "prefetch.buffer_size=4", "loader.collate={kind: ring, ring_size: 4}")
        result = cli(tmp_path, f"run.mode={mode}", *ring)
        assert result.returncode != 0
        assert "loader.collate.ring_size: must be >= 6" in result.stderr


# -- epochs without batches --------------------------------------------------------------------------


def test_an_epoch_of_zero_batches_is_refused() -> None:
    """10 items in batches of 64 with drop_last (the issue's config) name length, batch size and drop_last."""
    config = {
        "dataset": {"kind": "synthetic", "length": 10},
        "loader": {"kind": "torch", "batch_size": 64, "drop_last": True},
    }
    message = problems_of(config)["loader.drop_last"]
    assert message.startswith(
        "an epoch has no batches: dataset.length=10 items fewer than loader.batch_size=64, and "
        "loader.drop_last=true drops them; set drop_last: false or batch_size <= 10"
    )
    config["loader"]["batch_size"] = 10
    validate_plain(config)


@pytest.mark.parametrize(
    ("loader", "length", "path", "match"),
    [
        (
            {
                "kind": "torch",
                "batch_size": 2,
                "balance": "drop",
                "distributed": {"rank": 0, "world_size": 4},
            },
            3,
            "loader.balance",
            "dataset.length=3 items split between 4 ranks (loader.distributed) and loader.balance='drop'",
        ),
        (
            {
                "kind": "torch",
                "batch_size": 4,
                "drop_last": True,
                "balance": "drop",
                "distributed": {"rank": 1, "world_size": 2},
            },
            7,
            "loader.drop_last",
            "split between 2 ranks (loader.distributed), the smallest share 3,",
        ),
        (
            {"kind": "sharded", "batch_size": 4, "last_batch": "discard", "num_shards": 2},
            7,
            "loader.last_batch",
            "fewer than one step (loader.batch_size=4 × loader.num_shards=2 = 8)",
        ),
        (
            {
                "kind": "sharded",
                "batch_size": 4,
                "last_batch": "rollover",
                "distributed": {"rank": 0, "world_size": 2},
            },
            7,
            "loader.last_batch",
            "the first epoch has no steps: dataset.length=7 items split between 2 ranks",
        ),
    ],
)
def test_an_epoch_that_leaves_any_rank_without_batches_is_refused(
    loader: dict[str, Any], length: int, path: str, match: str
) -> None:
    """Whatever rank this is, a rank of the world given would get no batch: refused at the field to change."""
    config = {"dataset": {"kind": "synthetic", "length": length}, "loader": loader}
    assert match in problems_of(config)[path]


class Items(torch.utils.data.Dataset[dict[str, Any]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index}


def test_an_empty_epoch_of_a_dataset_known_only_once_built_is_refused_before_the_first_batch() -> None:
    """A `_target_` dataset's length is checked once built, with the same message, leaving nothing running."""
    config = {
        "dataset": {"_target_": f"{__name__}.Items", "n": 10},
        "loader": {
            "kind": "torch",
            "batch_size": 64,
            "drop_last": True,
            "prefetch_factor": 2,
            "num_workers": 1,
        },
        "prefetch": {"kind": "thread"},
    }
    with pytest.raises(
        ConfigError, match=r"loader\.drop_last: an epoch has no batches: len\(dataset\)=10 items fewer than"
    ):
        loaderfactory.build_loader(config)
    with pytest.raises(ConfigError, match=r"loader\.drop_last: an epoch has no batches: len\(dataset\)=3"):
        loaderfactory.build_loader(
            {"loader": {"kind": "torch", "batch_size": 4, "drop_last": True}}, dataset=list(range(3))
        )


@given(
    length=st.integers(1, 40),
    batch_size=st.integers(1, 12),
    drop_last=st.booleans(),
    world_size=st.integers(1, 6),
    balance=st.sampled_from(["pad", "drop", "uneven"]),
)
def test_the_torch_epoch_rule_refuses_exactly_when_some_rank_gets_no_batch(
    length: int, batch_size: int, drop_last: bool, world_size: int, balance: str
) -> None:
    """The rule agrees with the order engine's batches on every rank."""
    counts = [
        len(batches(rank_part(range(length), r, world_size, balance), batch_size, drop_last))  # type: ignore[arg-type]
        for r in range(world_size)
    ]
    problems = epochs.torch_epoch_problems(length, "n", batch_size, drop_last, world_size, balance)
    assert bool(problems) == (min(counts) == 0)


@given(
    length=st.integers(1, 40),
    batch_size=st.integers(1, 6),
    num_shards=st.integers(1, 3),
    last_batch=st.sampled_from(["keep", "discard", "rollover"]),
    world_size=st.integers(1, 4),
    balance=st.sampled_from(["pad", "drop", "uneven"]),
)
def test_the_sharded_epoch_rule_refuses_exactly_when_some_rank_gets_no_first_step(
    length: int, batch_size: int, num_shards: int, last_batch: str, world_size: int, balance: str
) -> None:
    """The rule agrees with the shard planner's first epoch on every rank."""
    counts = [
        ShardPlanner(
            length, batch_size, last_batch=last_batch, num_shards=num_shards,  # type: ignore[arg-type]
            rank=r, world_size=world_size, balance=balance,  # type: ignore[arg-type]
        ).count()
        for r in range(world_size)
    ]  # fmt: skip
    problems = epochs.sharded_epoch_problems(
        length, "n", batch_size, num_shards, last_batch, world_size, balance
    )
    assert bool(problems) == (min(counts) == 0)


# -- alias clashes -----------------------------------------------------------------------------------


def test_an_alias_clash_hides_no_other_problem_of_its_slot(tmp_path: Path) -> None:
    """A field given with its alias (in a YAML file) is reported beside the slot's typo and bad value."""
    path = tmp_path / "loader.yaml"
    path.write_text(
        "dataset: {kind: synthetic}\n"
        "loader: {kind: torch, batch_size: 4, bs: 4, shufle: true, num_workers: -1}\n"
        "prefetch: {kind: thread, timeout: 1, buffer_timeout: 2, buffer_size: 0}\n"
    )
    with pytest.raises(ConfigError) as caught:
        loaderfactory.build_loader(str(path))
    found = {p.path: p.message for p in caught.value.problems}
    assert found["loader.bs"] == "names the same field as 'batch_size'; give only one of them"
    assert found["loader.shufle"].startswith("unknown field (got True). Did you mean 'shuffle'?")
    assert found["loader.num_workers"] == "must be ≥ 0, got -1"
    assert found["prefetch.buffer_timeout"] == "names the same field as 'timeout'; give only one of them"
    assert found["prefetch.buffer_size"] == "must be ≥ 1, got 0"
    assert len(found) == 5


# -- rules the README states ---------------------------------------------------------------------------


def test_in_order_false_needs_workers() -> None:
    """`in_order` is one of the worker options the README says need `num_workers >= 1`."""
    config = {"dataset": {"kind": "synthetic"}, "loader": {"kind": "torch", "in_order": False}}
    message = problems_of(config)["loader.in_order"]
    assert message == "needs worker processes, but num_workers is 0; set num_workers >= 1 or drop in_order"
    config["loader"]["num_workers"] = 2
    validate_plain(config)
