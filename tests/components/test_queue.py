"""QueueDataset: modes, workers, the byte budget, capacity, wait_fill, seeding and sampling."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loaderfactory.compat import TorchQueueDataset
from loaderfactory.components.data.datasets import SyntheticDataset
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.components.queue.filler import index_order
from loaderfactory.errors import LimitError, StallError

FIELDS = {"vol": {"shape": [1, 4, 4, 4], "dtype": "float32"}}
ITEM_BYTES = 4 * 64


def small(length: int = 16, delay_ms: float = 0.0) -> SyntheticDataset:
    return SyntheticDataset(length, FIELDS, seed=3, delay_ms=delay_ms)


class Sized:
    """Items whose ``vol`` has ``sizes[i]`` float32 elements; records the order of loads."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.loaded: list[int] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> dict[str, Any]:
        with self._lock:
            self.loaded.append(index)
        return {"vol": torch.full((self.sizes[index],), float(index)), "index": index}


@pytest.mark.parametrize("worker_type", ["thread", "process"])
@pytest.mark.parametrize("mode", ["onsample", "always"])
def test_epoch_yields_epoch_size_batches_of_real_items(mode: str, worker_type: str) -> None:
    """Each mode and worker type yields ``epoch_size`` batches of stacked items equal to the dataset's."""
    ds = small()
    with QueueDataset(
        ds, epoch_size=7, mode=mode, num_workers=2, worker_type=worker_type, batch_size=3, seed=1
    ) as q:
        batches = list(q)
        assert len(q) == 7 and len(batches) == 7
        for batch in batches:
            assert batch["vol"].shape == (3, 1, 4, 4, 4)
            for row, index in zip(batch["vol"], batch["index"].tolist(), strict=True):
                assert torch.equal(row, ds[index]["vol"])
        assert q.sampling_counts.sum() == 7 * 3


def test_aliases_from_the_seed_work_in_python() -> None:
    """torchvtk's names (bs, q_maxlen, epoch_len, sample_tfm, batch_tfm, preprocess_fn) set our fields
    through compat's TorchQueueDataset."""
    calls: Counter[str] = Counter()

    def count(name: str) -> Any:
        def fn(item: Any) -> Any:
            calls[name] += 1
            return item

        return fn

    with TorchQueueDataset(
        small(),
        bs=2,
        q_maxlen=5,
        epoch_len=3,
        seed=0,
        sample_tfm=count("sample"),
        batch_tfm=count("batch"),
        preprocess_fn=count("pre"),
    ) as q:
        assert (q.batch_size, q.capacity, len(q)) == (2, 5, 3)
        list(q)
    assert calls["sample"] == 6 and calls["batch"] == 3 and calls["pre"] >= 5


def test_alias_and_name_together_are_refused() -> None:
    """Giving ``bs`` and ``batch_size`` at once is a TypeError: which one wins would be a guess."""
    with pytest.raises(TypeError, match="'bs' and 'batch_size' name the same argument"):
        TorchQueueDataset(small(), batch_size=2, bs=3)
    with pytest.raises(TypeError, match="unexpected argument 'bsz'"):
        TorchQueueDataset(small(), bsz=3)


@pytest.mark.parametrize(("ram_use", "budget"), [(2, 2_000_000), (1.5, 1_500_000)])
def test_ram_use_above_one_is_megabytes(ram_use: float, budget: int) -> None:
    """The seed's ``ram_use`` keeps its meaning: above 1 it is a budget in MB."""
    assert TorchQueueDataset(small(), ram_use=ram_use).budget == budget


def test_ram_use_up_to_one_is_a_fraction_of_available_memory() -> None:
    """``ram_use=0.25`` is a quarter of the memory available at construction."""
    import psutil

    budget = TorchQueueDataset(small(), ram_use=0.25).budget
    assert 0.2 * psutil.virtual_memory().available < budget < 0.3 * psutil.virtual_memory().available


@pytest.mark.parametrize("mode", ["onsample", "always"])
def test_budget_holds_in_bytes_with_items_of_mixed_sizes(mode: str) -> None:
    """With items from 1 to 40 KB the bytes held never exceed the budget, at any draw."""
    sizes = [256 * (1 + (i * 7) % 40) for i in range(40)]  # 1..40 KiB of float32
    budget = 120_000
    with QueueDataset(
        Sized(sizes),
        epoch_size=60,
        mode=mode,
        num_workers=2,
        ram_budget=budget,
        batch_size=2,
        log_sampling=True,
        seed=0,
        collate=list,
    ) as q:
        list(q)
        telemetry = q.telemetry()
        fill_mb = q.telemetry_log.fill_mb
    assert max(fill_mb) * 1e6 <= budget
    assert telemetry["peak_held_mb"] * 1e6 <= budget
    assert telemetry["peak_held_mb"] * 1e6 > budget - 4 * 40 * 1024  # it really filled up to the budget


def test_capacity_given_directly_caps_the_item_count() -> None:
    """``capacity`` limits the items held even when the budget would allow more."""
    with QueueDataset(small(), capacity=5, seed=0) as q:
        assert q.wait_fill_queue() == 5 and q.capacity == 5


def test_capacity_from_avg_item_size_in_megabytes() -> None:
    """``avg_item_size`` in MB gives capacity = budget // item size."""
    q = QueueDataset(small(64), ram_budget=10**6, avg_item_size=0.1)
    assert q.capacity == 10


def test_capacity_from_an_example_tensor_and_item() -> None:
    """An example tensor, or a whole example item, is measured for the item size."""
    assert QueueDataset(small(64), ram_budget=2560, avg_item_size=torch.zeros(64)).capacity == 10
    example = {"vol": torch.zeros(32), "mask": torch.zeros(32, dtype=torch.uint8)}
    assert QueueDataset(small(64), ram_budget=1600, avg_item_size=example).capacity == 10


def test_capacity_measured_from_loaded_items() -> None:
    """With no size given, the budget fills with as many real items as fit in its bytes."""
    with QueueDataset(small(64), ram_budget=ITEM_BYTES * 6 + 10, seed=0) as q:
        assert q.capacity == 64  # only bounded by the dataset until items are measured
        assert q.wait_fill_queue() == 6


def test_capacity_never_exceeds_the_dataset() -> None:
    """A queue holds at most one slot per dataset item: more would only hold duplicates."""
    assert QueueDataset(small(16), capacity=100).capacity == 16


def test_budget_below_one_item_is_refused_before_any_worker_starts() -> None:
    """A budget smaller than ``avg_item_size`` is a LimitError naming both sizes."""
    before = threading.active_count()
    with pytest.raises(LimitError, match=r"ram_budget: 0\.001 MB holds not even one item of 0\.002 MB"):
        QueueDataset(small(), ram_budget=1000, avg_item_size=0.002)
    assert threading.active_count() == before


def test_budget_below_the_first_measured_item_is_refused_at_the_first_draw() -> None:
    """Without a size hint, the first loaded item that exceeds the budget stops the queue with both sizes."""
    q = QueueDataset(small(), ram_budget=100, seed=0)
    with pytest.raises(
        LimitError, match=r"item \d+ takes 0\.000 MB, more than the whole budget of 0\.000 MB"
    ) as info:
        next(iter(q))
    assert info.value.component is q
    q.close()


def test_budget_above_available_memory_is_refused_with_the_figures() -> None:
    """Asking for more bytes than are available names both figures."""
    with pytest.raises(LimitError, match=r"ram_budget: .* MB is more than the .* MB of memory available"):
        QueueDataset(small(), ram_budget=100 * 10**12)


def test_wait_fill_true_waits_for_a_full_queue() -> None:
    """``wait_fill=True`` means a full queue before the first draw, not one item (the seed's bug)."""
    with QueueDataset(
        small(32, delay_ms=2), capacity=12, wait_fill=True, mode="always", seed=0, log_sampling=True
    ) as q:
        next(iter(q))
        assert q.telemetry_log.fill[0] == 12
        q.close()


def test_wait_fill_int_waits_for_that_many_items() -> None:
    """``wait_fill=5`` has at least five items in the queue at the first draw."""
    with QueueDataset(small(32, delay_ms=2), wait_fill=5, mode="always", seed=0, log_sampling=True) as q:
        next(iter(q))
        assert q.telemetry_log.fill[0] >= 5
        q.close()


def test_wait_fill_timeout_raises_a_stall_error() -> None:
    """A queue that cannot fill in ``wait_fill_timeout`` raises StallError (a TimeoutError), with figures."""
    q = QueueDataset(small(32, delay_ms=50), wait_fill=True, wait_fill_timeout=0.2, seed=0)
    with pytest.raises(StallError, match=r"wait_fill timed out after 0\.2 s with \d+ items"):
        next(iter(q))
    q.close()


def test_wait_fill_timeout_can_warn_instead() -> None:
    """With ``on_fill_timeout='warn'`` the timeout is a warning and drawing goes on."""
    with (
        QueueDataset(
            small(32, delay_ms=50), wait_fill_timeout=0.1, on_fill_timeout="warn", epoch_size=2, seed=0
        ) as q,
        pytest.warns(RuntimeWarning, match="wait_fill timed out"),
    ):
        assert len(list(q)) == 2


def test_draw_timeout_raises_a_stall_error() -> None:
    """A draw that waits on stuck workers longer than ``timeout`` raises StallError."""
    gate = threading.Event()

    class Stuck(SyntheticDataset):
        def __getitem__(self, index: int) -> Any:
            if index != 0:
                gate.wait(10)
            return super().__getitem__(index)

    ds = Stuck(8, FIELDS)
    q = QueueDataset(ds, wait_fill=False, timeout=0.2, capacity=2, seed=5)
    try:
        with pytest.raises(StallError, match=r"no batch for 0\.2 s"):
            for _ in q:
                pass
    finally:
        gate.set()
        q.close()


def test_seeded_onsample_with_one_worker_is_reproducible() -> None:
    """Mode onsample with one worker and a seed draws the same batches every run; another seed differs."""

    def draws(seed: int) -> list[list[int]]:
        with QueueDataset(
            small(16), epoch_size=30, capacity=6, batch_size=2, seed=seed, sample_transforms=None
        ) as q:
            return [b["index"].tolist() for b in q]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_every_item_loads_once_before_any_loads_twice() -> None:
    """Workers share each pass disjointly: the first ``len(dataset)`` loads are a permutation."""
    ds = Sized([16] * 12)
    with QueueDataset(
        ds, mode="onsample", num_workers=3, worker_type="thread", epoch_size=40, seed=2, capacity=4
    ) as q:
        list(q)
    assert len(ds.loaded) >= 4 + 40 - 1  # onsample: the fill, then one load per draw
    # Indices are handed out in pass order; a worker may record its load up to
    # ``num_workers - 1`` places late, so only that much slack is allowed at each pass boundary.
    slack = 3 - 1
    for start in (0, 12):
        assert len(set(ds.loaded[start : start + 12 - slack])) == 12 - slack, ds.loaded
    assert set(ds.loaded[: 12 + slack]) == set(range(12))  # the whole first pass, give or take the slack


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 50), seed=st.integers(0, 2**40), passes=st.integers(1, 3))
def test_dispenser_hands_out_each_index_once_per_pass(length: int, seed: int, passes: int) -> None:
    """Every pass of the index order is a permutation of the dataset's indices."""
    order = index_order(length, seed)
    for _ in range(passes):
        assert sorted(next(order) for _ in range(length)) == list(range(length))


def test_onsample_lets_one_item_in_per_draw() -> None:
    """In mode onsample, once full, each draw lets exactly one new item in."""
    with QueueDataset(small(64), capacity=8, epoch_size=20, seed=0) as q:
        list(q)
        telemetry = q.telemetry()
    assert telemetry["evictions"] == 20
    assert 8 + 19 <= telemetry["loads"] <= 8 + 20  # the last replacement may still be loading


def test_onsample_draws_are_roughly_uniform() -> None:
    """After many onsample draws the most drawn item is drawn at most twice as often as the least."""
    with QueueDataset(small(16), capacity=8, epoch_size=2000, batch_size=2, seed=0) as q:
        list(q)
        ratio = q.telemetry()["sampling_max_min_ratio"]
    assert ratio is not None and ratio <= 2.0


def test_sample_and_batch_transforms_get_the_queue_generator() -> None:
    """Transforms following ``f(item, generator)`` receive the queue's seeded torch.Generator."""
    seen: list[Any] = []

    def tfm(item: Any, generator: torch.Generator | None = None) -> Any:
        seen.append(generator)
        return item

    with QueueDataset(small(), epoch_size=2, sample_transforms=tfm, batch_transforms=tfm, seed=0) as q:
        list(q)
    assert len(seen) == 4 and all(isinstance(g, torch.Generator) for g in seen)


def test_stored_items_are_not_changed_by_sample_transforms() -> None:
    """A transform that returns new tensors leaves the queued items intact for later draws."""
    from loaderfactory.components.data.transforms import GaussianNoise

    ds = small(4)
    with QueueDataset(
        ds, epoch_size=20, capacity=4, sample_transforms=GaussianNoise(std=1.0), seed=0, batch_size=4
    ) as q:
        list(q)
        run = q._run
        assert run is not None
        for entry in list(run.store._entries):
            assert torch.equal(entry.item["vol"], ds[entry.index]["vol"])


def test_get_dataloader_passes_batches_through_and_refuses_batching() -> None:
    """``get_dataloader`` passes the queue's batches on; batch_size, collate and workers are refused."""
    with QueueDataset(small(), epoch_size=3, batch_size=2, seed=0) as q:
        loader = q.get_dataloader()
        batches = list(loader)
        assert len(loader) == 3 and batches[0]["vol"].shape == (2, 1, 4, 4, 4)
        with pytest.raises(TypeError, match="set by the queue itself"):
            q.get_dataloader(batch_size=4)
        with pytest.raises(ValueError, match="num_workers must be 0"):
            q.get_dataloader(num_workers=2)


def test_state_dict_is_json_and_restores_the_counts() -> None:
    """The state dict is plain JSON and carries the sampling counts into a new queue."""
    import json

    with QueueDataset(small(), epoch_size=5, seed=0) as q:
        list(q)
        state = json.loads(json.dumps(q.state_dict()))
    fresh = QueueDataset(small(), seed=0)
    fresh.load_state_dict(state)
    assert fresh.sampling_counts.sum() == 5 and fresh.state_dict() == state
