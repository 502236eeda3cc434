"""Small batches leave worker processes by value: the same batches, only faster."""

from __future__ import annotations

import pickle
from collections import Counter, namedtuple
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, default_collate

from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.components.workers import batch_transfer
from loaderfactory.components.workers.batch_transfer import BY_VALUE_BYTES, ByValueCollate, SmallBatch
from loaderfactory.components.workers.watched import stop_loader_workers

Pair = namedtuple("Pair", "left right")


class Mixed(Dataset[dict[str, Any]]):
    """Items with every kind of field a collate meets: dtypes, shapes, strings, nesting."""

    def __init__(self, count: int = 40) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "id": index,
            "pixels": torch.full((3, 5), index % 256, dtype=torch.uint8),
            "mask": torch.arange(4) % (index + 2) == 0,
            "value": torch.tensor(index / 7, dtype=torch.float64),
            "half": torch.full((2,), index, dtype=torch.bfloat16),
            "complex": torch.full((2,), complex(index, -index), dtype=torch.complex64),
            "empty": torch.zeros(0, 3),
            "name": f"item-{index}",
            "pair": Pair(torch.tensor([index, index + 1]), [index * 2]),
            "array": np.full(2, index, dtype=np.int16),
        }


class Sized(Dataset[torch.Tensor]):
    """8 items of ``size`` bytes, each filled with its index."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((self.size,), index, dtype=torch.uint8)


def _same(left: Any, right: Any) -> None:
    assert type(left) is type(right)
    if isinstance(left, torch.Tensor):
        assert (left.dtype, left.shape, left.stride()) == (right.dtype, right.shape, right.stride())
        assert torch.equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            _same(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            _same(a, b)
    else:
        assert left == right


def _sent(batch: Any) -> tuple[Any, Any]:
    """(how the batch was reduced, the batch rebuilt). Plain pickle: torch's shared-memory pickling
    would start multiprocessing's descriptor-sharing thread in the test process."""
    rebuild = SmallBatch(batch).__reduce__()[0]
    return rebuild, pickle.loads(pickle.dumps(SmallBatch(batch)))


def test_a_small_batch_is_sent_by_value_and_comes_back_equal_and_writable() -> None:
    batch = default_collate([Mixed()[i] for i in range(8)])
    rebuild, back = _sent(batch)
    assert rebuild is batch_transfer._rebuilt
    _same(batch, back)
    back["pixels"] += 1  # writable: a training step may change a batch in place
    assert torch.equal(back["pixels"], batch["pixels"] + 1)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: {"big": torch.zeros(BY_VALUE_BYTES + 1, dtype=torch.uint8)}, id="too-large"),
        pytest.param(lambda: {"view": torch.arange(10)[2:5]}, id="a-view-of-a-larger-storage"),
        pytest.param(lambda: {"transposed": torch.zeros(3, 4).t()}, id="not-contiguous"),
        pytest.param(lambda: (lambda t: {"a": t, "b": t})(torch.ones(3)), id="two-names-for-one-tensor"),
        pytest.param(lambda: {"sub": torch.nn.Parameter(torch.ones(2), requires_grad=False)}, id="subclass"),
    ],
)
def test_what_must_stay_as_torch_sends_it_does(make: Any) -> None:
    batch = make()
    rebuild, back = _sent(batch)
    assert rebuild is batch_transfer._as_sent
    _same(batch, back)


def test_two_names_for_one_tensor_stay_one_tensor() -> None:
    shared = torch.ones(3)
    back = pickle.loads(pickle.dumps(SmallBatch({"a": shared, "b": shared})))
    back["a"] += 1
    assert torch.equal(back["b"], torch.full((3,), 2.0))


def test_a_batch_torch_cannot_send_fails_as_it_does_without_by_value() -> None:
    leaf = torch.ones(2, requires_grad=True)
    batch = {"grad": leaf * 2}  # not a leaf: torch refuses to send it between processes
    with pytest.raises(RuntimeError, match="requires_grad") as plain:
        ForkingPickler.dumps(batch)
    with pytest.raises(RuntimeError) as ours:
        ForkingPickler.dumps(SmallBatch(batch))
    assert str(ours.value) == str(plain.value)


def test_outside_a_worker_the_collate_returns_the_batch_itself() -> None:
    items = [Mixed()[i] for i in range(3)]
    assert isinstance(ByValueCollate(default_collate)(items), dict)
    assert pickle.loads(pickle.dumps(ByValueCollate(default_collate))).collate is default_collate


def test_worker_batches_equal_the_in_process_ones_and_every_id_comes_once() -> None:
    """Through torch's worker processes (spawned ones need the collate pickled: tested above)."""
    dataset = Mixed(40)
    expected = list(ResumableDataLoader(dataset, batch_size=6, num_workers=0))
    loader = ResumableDataLoader(dataset, batch_size=6, num_workers=2, persistent_workers=True)
    for _ in range(2):  # persistent workers keep the by-value collate for the next epoch
        got = list(loader)
        assert len(got) == len(expected)
        for ours, theirs in zip(got, expected, strict=True):
            _same(ours, theirs)
        assert Counter(i for batch in got for i in batch["id"].tolist()) == Counter(range(40))
    assert loader.collate_fn is default_collate  # the user's collate, as given
    stop_loader_workers(loader, grace_s=5.0)


def test_a_large_batch_still_comes_in_shared_memory_and_a_small_one_does_not() -> None:
    sizes = [BY_VALUE_BYTES // 4 + 1, 16]  # 4 items a batch: just over the limit, and far under it
    for size in sizes:
        loader = ResumableDataLoader(Sized(size), batch_size=4, num_workers=1)
        batches = list(loader)
        assert [b[:, 0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert all(b.is_shared() for b in batches) == (size == sizes[0])


def test_a_collate_that_shares_its_own_buffers_is_left_alone() -> None:
    from loaderfactory.components.data.ring_collate import RingCollate

    ring = RingCollate(ring_size=4)
    loader = ResumableDataLoader(Mixed(12), batch_size=3, num_workers=1, collate_fn=ring)
    with batch_transfer.small_batches_by_value(loader):
        assert loader.collate_fn is ring
    plain = ResumableDataLoader(Mixed(12), batch_size=3, num_workers=1)
    with batch_transfer.small_batches_by_value(plain):
        assert isinstance(plain.collate_fn, ByValueCollate)
    assert plain.collate_fn is default_collate
