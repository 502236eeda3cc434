"""The ``sharded`` loader: batches, shards, last_batch, ranks, workers, failures, spec and YAML."""

from __future__ import annotations

import gc
import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import psutil
import pytest
import torch

import loaderfactory as lf
from loaderfactory import compat
from loaderfactory.builders import BuildContext
from loaderfactory.builders.sharded import build_sharded_loader
from loaderfactory.components.steps import ShardedDataLoader, WorkerTraceback, get_worker_info
from loaderfactory.config.specs.sharded import ShardedLoaderSpec
from loaderfactory.errors import ConfigError, StallError, WorkerError


class Items:
    """Item ``i`` is ``{"x": tensor([i, i]), "index": i}``."""

    def __init__(self, length: int = 50) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": torch.full((2,), float(index)), "index": index}


class Failing(Items):
    def __getitem__(self, index: int) -> dict[str, Any]:
        if index == 13:
            raise KeyError(f"item {index} is corrupt")
        return super().__getitem__(index)


class Sleepy(Items):
    """Items from ``slow_from`` on take ``seconds`` each."""

    def __init__(self, slow_from: int, seconds: float) -> None:
        super().__init__(50)
        self.slow_from, self.seconds = slow_from, seconds

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index >= self.slow_from:
            time.sleep(self.seconds)
        return super().__getitem__(index)


class Random(Items):
    def __getitem__(self, index: int) -> dict[str, Any]:
        info = get_worker_info()
        return {
            "worker": -1 if info is None else info.id,
            "torch": torch.rand(()).item(),
            "numpy": float(np.random.rand()),
            "random": random.random(),
        }


def indices(batch: Any) -> list[int]:
    if isinstance(batch, list):
        return [i for shard in batch for i in indices(shard)]
    return [int(i) for i in batch["index"]]


def epoch_indices(loader: Any) -> tuple[int, list[int], int]:
    """(len() before the epoch, indices yielded, steps yielded)."""
    expected = len(loader)
    seen: list[int] = []
    steps = 0
    for batch in loader:
        seen += indices(batch)
        steps += 1
    return expected, seen, steps


def gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.05)
    return False


# -- last_batch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_keep_yields_every_index_once_per_epoch(num_workers: int) -> None:
    """keep: every epoch yields each index exactly once, the last batch short, and len() is exact."""
    with ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=3, num_workers=num_workers) as loader:
        orders = []
        for _ in range(3):
            expected, seen, steps = epoch_indices(loader)
            assert sorted(seen) == list(range(50))
            assert steps == expected == 7
            orders.append(seen)
        assert orders[0] != orders[1]


def test_discard_drops_only_the_short_batch() -> None:
    """discard: each epoch yields 48 distinct indices in 6 full batches."""
    loader = ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=3, last_batch="discard")
    for _ in range(3):
        expected, seen, steps = epoch_indices(loader)
        assert steps == expected == 6
        assert len(seen) == len(set(seen)) == 48


@pytest.mark.parametrize("num_workers", [0, 1])
def test_rollover_carries_the_rest_into_the_next_epoch(num_workers: int) -> None:
    """rollover: full batches only; over epochs, yielded plus carried is every index once per epoch."""
    loader = ShardedDataLoader(
        Items(50), batch_size=8, shuffle=True, seed=5, last_batch="rollover", num_workers=num_workers
    )
    seen: Counter[int] = Counter()
    lengths = []
    for _ in range(4):
        expected, got, steps = epoch_indices(loader)
        assert steps == expected
        assert len(got) == 8 * steps
        lengths.append(steps)
        seen.update(got)
    carry = loader.state_dict()["carry"]
    assert lengths == [6, 6, 6, 7]  # 2, 4 and 6 carried; the fourth epoch has 56
    seen.update(carry)
    assert seen == Counter({i: 4 for i in range(50)})
    loader.close()


def test_rollover_state_survives_a_new_loader() -> None:
    """The carried rest is in state_dict(): a fresh loader loaded from it starts with those indices."""
    first = ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=5, last_batch="rollover")
    epoch_indices(first)
    state = first.state_dict()
    assert state["epoch"] == 1 and len(state["carry"]) == 2
    second = ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=5, last_batch="rollover")
    second.load_state_dict(state)
    _, got_second, _ = epoch_indices(second)
    _, got_first, _ = epoch_indices(first)
    assert got_second[:2] == state["carry"]
    assert got_second == got_first


@pytest.mark.parametrize("stop_at", [0, 3, 6])
def test_resume_mid_epoch_yields_exactly_the_rest(stop_at: int) -> None:
    """Restoring a state taken mid-epoch yields exactly the remaining steps of that epoch."""
    loader = ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=9)
    full = [indices(b) for b in loader]
    loader.set_epoch(0)
    iterator = iter(loader)
    for _ in range(stop_at):
        next(iterator)
    state = loader.state_dict()
    fresh = ShardedDataLoader(Items(50), batch_size=8, shuffle=True, seed=9)
    fresh.load_state_dict(state)
    assert len(fresh) == len(full)  # len() is the epoch's; the resumed pass yields the rest
    assert [indices(b) for b in fresh] == full[stop_at:]


# -- shards ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_sampler_of_shards_gives_one_batch_per_shard(num_workers: int) -> None:
    """A batch sampler yielding lists of index lists gives a list of batches, one per inner list."""
    steps = [[[0, 1, 2], [3, 4]], [[5], [6, 7, 8]], [9, 10]]
    with ShardedDataLoader(Items(), batch_sampler=steps, num_workers=num_workers) as loader:
        got = list(loader)
    assert [[b["index"].tolist() for b in step] for step in got[:2]] == steps[:2]
    assert got[2]["index"].tolist() == [9, 10]
    assert len(loader) == 3


def test_num_shards_groups_batches_and_pads_the_last_step() -> None:
    """num_shards=3: every step holds 3 batches; keep fills the last step with the epoch's first batches."""
    loader = ShardedDataLoader(Items(50), batch_size=8, num_shards=3)
    expected, seen, steps = epoch_indices(loader)
    assert steps == expected == 3
    got = list(loader)
    assert all(isinstance(step, list) and len(step) == 3 for step in got)
    assert seen[:50] == list(range(50))
    assert seen[50:] == list(range(16))  # [48, 49] short, then the first two batches again
    discard = ShardedDataLoader(Items(50), batch_size=8, num_shards=3, last_batch="discard")
    assert len(discard) == len(list(discard)) == 2


# -- ranks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("balance", ["pad", "drop", "uneven"])
def test_ranks_split_one_shuffled_epoch(balance: str) -> None:
    """Ranks with one seed and epoch load disjoint parts of one shuffle, equal in steps unless uneven."""
    loaders = [
        ShardedDataLoader(
            Items(50), batch_size=4, shuffle=True, seed=1, rank=r, world_size=3, balance=balance
        )  # type: ignore[arg-type]
        for r in range(3)
    ]
    for epoch in (0, 1):
        results = []
        for loader in loaders:
            loader.set_epoch(epoch)
            results.append(epoch_indices(loader))
        parts = [seen for _, seen, _ in results]
        union = Counter(i for part in parts for i in part)
        if balance == "pad":
            assert set(union) == set(range(50)) and sum(union.values()) == 51
        elif balance == "drop":
            assert max(union.values()) == 1 and len(union) == 48
        else:
            assert union == Counter(range(50))
        steps = [s for _, _, s in results]
        assert steps == [e for e, _, _ in results]
        assert len(set(steps)) == 1 or balance == "uneven"


def test_set_epoch_reproduces_an_epoch_and_passes_advance_it() -> None:
    """Each pass advances the epoch by itself; set_epoch(e) replays epoch e's order."""
    loader = ShardedDataLoader(Items(50), batch_size=10, shuffle=True, seed=2)
    first, second = epoch_indices(loader)[1], epoch_indices(loader)[1]
    assert first != second and loader.epoch == 2
    loader.set_epoch(1)
    assert epoch_indices(loader)[1] == second


def test_auto_reads_torchrun_environment_once_at_build_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """distributed: auto takes RANK/WORLD_SIZE when the loader is built; later changes do nothing."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    spec = ShardedLoaderSpec(batch_size=5, shuffle=True, seed=0)
    loader = build_sharded_loader(spec, Items(20), BuildContext())
    monkeypatch.setenv("RANK", "0")
    assert (loader.rank, loader.world_size) == (1, 2)
    explicit = build_sharded_loader(
        ShardedLoaderSpec(batch_size=5, shuffle=True, seed=0, distributed={"rank": 0, "world_size": 2}),
        Items(20),
        BuildContext(),
    )
    off = build_sharded_loader(ShardedLoaderSpec(batch_size=5, distributed="off"), Items(20), BuildContext())
    assert (explicit.rank, explicit.world_size, off.world_size) == (0, 2, 1)
    assert set(epoch_indices(loader)[1]).isdisjoint(epoch_indices(explicit)[1])


# -- workers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_workers_return_batches_in_order(worker_type: str) -> None:
    """With 3 workers results come back in step order; process workers hand tensors over in shared memory."""
    with ShardedDataLoader(Items(60), batch_size=4, num_workers=3, worker_type=worker_type) as loader:
        batches = list(loader)
    assert [i for b in batches for i in indices(b)] == list(range(60))
    assert all(b["x"].is_shared() for b in batches) == (worker_type == "process")


def test_prefetch_bounds_the_steps_in_flight() -> None:
    """prefetch=2 lets the workers run at most 2 steps ahead of the consumer."""
    started: list[int] = []
    reached = threading.Event()

    class Counting(Items):
        def __getitem__(self, index: int) -> dict[str, Any]:
            started.append(index)
            if len(started) >= 3:
                reached.set()
            return super().__getitem__(index)

    with ShardedDataLoader(
        Counting(), batch_size=1, num_workers=2, worker_type="thread", prefetch=2
    ) as loader:
        iterator = iter(loader)
        next(iterator)
        assert reached.wait(10)
        time.sleep(0.3)  # room for a runaway worker to go further; the bound says it must not
        assert len(started) == 3
        del iterator


def test_persistent_workers_survive_epochs_and_close_stops_them() -> None:
    """persistent_workers keeps the same processes between complete epochs; close() ends them."""
    loader = ShardedDataLoader(Items(20), batch_size=5, num_workers=2, persistent_workers=True)
    list(loader)
    pids = loader.worker_pids
    list(loader)
    assert loader.worker_pids == pids and len(pids) == 2
    loader.close()
    assert gone(pids)


def test_workers_are_fresh_each_epoch_without_persistence() -> None:
    """Without persistent_workers every epoch starts and stops its own processes."""
    loader = ShardedDataLoader(Items(20), batch_size=5, num_workers=1)
    iterator = iter(loader)
    next(iterator)
    pids = loader.worker_pids
    list(iterator)
    assert gone(pids) and loader.worker_pids == []


class RandomTogether(Random):
    """Items 0 and 1 wait for each other, so two thread workers load one each, however busy the machine."""

    def __init__(self) -> None:
        super().__init__()
        self.together = threading.Barrier(2)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 2:
            self.together.wait(timeout=30)
        return super().__getitem__(index)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_each_worker_gets_its_own_reproducible_seed(worker_type: str) -> None:
    """Workers draw different torch, numpy and random numbers, the same again for the same seed."""

    def draws() -> dict[int, tuple[float, float, float]]:
        with ShardedDataLoader(
            RandomTogether() if worker_type == "thread" else Random(),
            batch_size=1,
            num_workers=2,
            worker_type=worker_type,
            seed=11,
            collate=lambda items: items[0],
        ) as loader:
            first = {}
            for item in loader:
                first.setdefault(item["worker"], (item["torch"], item["numpy"], item["random"]))
            return first

    first, again = draws(), draws()
    assert sorted(first) == [0, 1]
    if worker_type == "process":
        assert first == again
        assert all(a != b for a, b in zip(first[0], first[1], strict=True))


def test_pin_memory_is_a_no_op_without_an_accelerator() -> None:
    """pin_memory=True works on a CPU-only machine (pins only where an accelerator exists)."""
    loader = ShardedDataLoader(Items(8), batch_size=4, pin_memory=True)
    batch = next(iter(loader))
    assert batch["x"].is_pinned() == torch.accelerator.is_available()


# -- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_a_worker_exception_keeps_its_type_and_traceback(worker_type: str) -> None:
    """A KeyError raised in a worker reaches the consumer as a KeyError with the worker's traceback."""
    loader = ShardedDataLoader(Failing(), batch_size=4, num_workers=2, worker_type=worker_type)
    with pytest.raises(KeyError, match="item 13 is corrupt") as info:
        list(loader)
    if worker_type == "process":
        assert isinstance(info.value.__cause__, WorkerTraceback)
        assert "in __getitem__" in str(info.value.__cause__)
    else:
        assert any(frame.name == "__getitem__" for frame in info.traceback)
    loader.close()


def test_a_killed_worker_raises_worker_error_within_seconds() -> None:
    """SIGKILL on a worker raises WorkerError (a RuntimeError) naming pid and signal; no process stays."""
    loader = ShardedDataLoader(Sleepy(slow_from=8, seconds=60), batch_size=4, num_workers=2, timeout=100)
    iterator = iter(loader)
    next(iterator)
    pids = loader.worker_pids
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"pid {pids[1]}\) was killed by signal SIGKILL") as info:
        for _ in range(3):  # a batch the worker finished before it was killed may still arrive
            next(iterator)
    assert isinstance(info.value, WorkerError)
    assert time.monotonic() - started < 30
    assert gone(pids)


def test_a_stuck_worker_raises_stall_error_after_timeout() -> None:
    """A worker that sends nothing for `timeout` seconds raises StallError (a TimeoutError) and is stopped."""
    loader = ShardedDataLoader(Sleepy(slow_from=0, seconds=60), batch_size=2, num_workers=1, timeout=0.5)
    iterator = iter(loader)
    with pytest.raises(TimeoutError, match=r"worker 0 \(pid \d+\) sent no batch for 0.5 s") as info:
        next(iterator)
    assert isinstance(info.value, StallError)
    assert loader.worker_pids == []


def test_early_break_and_garbage_collection_stop_the_workers() -> None:
    """Breaking out of an epoch and dropping the iterator ends its worker processes."""
    loader = ShardedDataLoader(Items(400), batch_size=2, num_workers=2)
    for _ in loader:
        pids = loader.worker_pids
        break
    gc.collect()
    assert gone(pids)
    persistent = ShardedDataLoader(Items(40), batch_size=2, num_workers=2, persistent_workers=True)
    list(persistent)
    pids = persistent.worker_pids
    del persistent
    gc.collect()
    assert gone(pids)


# -- arguments, spec and YAML ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "batch_size: required unless batch_sampler is set"),
        (
            {"batch_sampler": [[0]], "batch_size": 2, "shuffle": True},
            "batch_size: must not be set with batch_sampler",
        ),
        (
            {"batch_sampler": [[0]], "last_batch": "rollover"},
            "last_batch: must not be set with batch_sampler",
        ),
        ({"batch_size": 2, "sampler": [0, 1], "shuffle": True}, "shuffle: must be false with a sampler"),
        ({"batch_size": 2, "last_batch": "roll"}, "last_batch must be one of keep, discard, rollover"),
        ({"batch_size": 2, "rank": 1}, "give rank and world_size together"),
        ({"batch_size": 2, "rank": 2, "world_size": 2}, r"rank must be in \[0, world_size\)"),
    ],
)
def test_the_seeds_argument_rules_are_value_errors(kwargs: dict[str, Any], message: str) -> None:
    """Conflicting or missing arguments raise ValueError saying which."""
    with pytest.raises(ValueError, match=message):
        ShardedDataLoader(Items(), **kwargs)


def test_the_seeds_names_are_aliases_in_compat_and_the_spec() -> None:
    """gluon-nlp's signature in compat: batchify_fn is collate, thread_pool=True means thread workers."""
    loader = compat.ShardedDataLoader(Items(8), 4, False, None, None, None, len, 1, False, None, True)
    assert isinstance(loader, ShardedDataLoader)
    assert loader.worker_type == "thread"
    assert list(loader) == [4, 4]
    spec = ShardedLoaderSpec.model_validate(
        {"bs": 4, "thread_pool": True, "batchify_fn": {"kind": "default"}}
    )
    assert (spec.batch_size, spec.worker_type, spec.collate.kind) == (4, "thread", "default")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"collate": list, "batchify_fn": list}, "collate and batchify_fn name the same"),
        (
            {"worker_type": "thread", "thread_pool": False},
            "worker_type='thread' and thread_pool=False contradict",
        ),
    ],
)
def test_the_compat_wrapper_refuses_a_name_given_twice(kwargs: dict[str, Any], message: str) -> None:
    """A seed's name and ours given for one argument raise ValueError saying which."""
    with pytest.raises(ValueError, match=message):
        compat.ShardedDataLoader(Items(), 2, **kwargs)


@pytest.mark.parametrize("name", ["batchify_fn", "thread_pool"])
def test_the_component_takes_canonical_names_only(name: str) -> None:
    """The seed's names live in compat: the component itself refuses them."""
    with pytest.raises(TypeError, match=name):
        ShardedDataLoader(Items(), batch_size=2, **{name: True})


def test_a_runtime_argument_error_is_a_config_error_at_build() -> None:
    """A rule only the runtime can check (a dataset without len()) is a ConfigError naming the slot."""

    class Unsized:
        def __getitem__(self, index: int) -> int:
            return index

    with pytest.raises(ConfigError, match="loader: the dataset has no len") as info:
        build_sharded_loader(ShardedLoaderSpec(batch_size=2, distributed="off"), Unsized(), BuildContext())
    assert info.value.paths == ["loader"]


@pytest.mark.parametrize(
    ("overrides", "paths", "message"),
    [
        (
            ["loader.shuffle=true", "+loader.sampler={_target_: torch.utils.data.SequentialSampler}"],
            ["loader.shuffle"],
            "must be false with a sampler",
        ),
        (
            ["loader.batch_sampler={_target_: torch.utils.data.BatchSampler}", "loader.last_batch=discard"],
            ["loader.batch_size", "loader.last_batch"],
            "must not be set with batch_sampler",
        ),
        (["loader.batch_size=null"], ["loader.batch_size"], "required unless batch_sampler is set"),
        (
            ["loader.timeout=2", "loader.persistent_workers=true"],
            ["loader.persistent_workers", "loader.timeout"],
            "needs workers, but num_workers is 0",
        ),
        (
            ["loader.distributed={rank: 2, world_size: 2}"],
            ["loader.distributed.rank"],
            r"must be < world_size \(2\)",
        ),
        (["loader.last_batch=rollback"], ["loader.last_batch"], "must be one of"),
    ],
)
def test_broken_rules_are_config_errors_at_their_field(
    overrides: list[str], paths: list[str], message: str
) -> None:
    """The argument rules in YAML are ConfigErrors located at the field to change."""
    cfg = lf.compose(["loader=sharded", *[o.replace("+loader.sampler", "loader.sampler") for o in overrides]])
    with pytest.raises(ConfigError, match=message) as info:
        lf.validate(cfg)
    assert sorted(info.value.paths) == sorted(paths)


@pytest.mark.parametrize("preset", ["sharded", "sharded_ddp", "sharded_multi_device"])
def test_presets_build_and_yield_what_len_says(preset: str) -> None:
    """Each shipped sharded preset validates, builds and yields len() steps."""
    cfg = lf.compose([f"loader={preset}", "~prefetch", "dataset.length=130", "loader.num_workers=1"])
    with lf.build_loader(cfg) as loader:
        assert len(list(loader)) == len(loader) > 0


def test_a_batched_upstream_is_refused() -> None:
    """After a queue that yields batches the sharded loader refuses, saying why."""
    spec = ShardedLoaderSpec(batch_size=4)
    with pytest.raises(ConfigError, match="the queue slot already yields batches"):
        build_sharded_loader(spec, Items(), BuildContext(batched=True))
