"""``RingCollate``: default_collate's values, in buffers reused after ``ring_size`` more batches."""

from __future__ import annotations

import pickle
import threading
from collections import deque
from typing import Any, NamedTuple

import pytest
import torch
from pydantic import ValidationError
from torch.utils.data import DataLoader, Dataset, default_collate

import loaderfactory
from loaderfactory import ThreadBuffer
from loaderfactory.components.data.ring_collate import RingCollate
from loaderfactory.config.specs.collate import RingCollateSpec


def items(batch: int, size: int = 4, n: int = 3) -> list[dict[str, Any]]:
    """``n`` dict items whose tensors encode the batch and item number, so overwrites show."""
    return [
        {"vol": torch.full((size, 2), 100.0 * batch + i), "label": batch * n + i, "name": f"b{batch}i{i}"}
        for i in range(n)
    ]


class Batches(Dataset[dict[str, Any]]):
    """The items of ``batches`` batches of :func:`items`, in order."""

    def __init__(self, batches: int, n: int = 3) -> None:
        self.items = [item for b in range(batches) for item in items(b, n=n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]


class Pair(NamedTuple):
    x: torch.Tensor
    y: int


def assert_same(batch: Any, expected: Any) -> None:
    assert type(batch) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert batch.dtype == expected.dtype and torch.equal(batch, expected)
    elif isinstance(expected, dict):
        assert list(batch) == list(expected)
        for key in expected:
            assert_same(batch[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert len(batch) == len(expected)
        for got, want in zip(batch, expected, strict=True):
            assert_same(got, want)
    else:
        assert batch == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda b: items(b),
        lambda b: [torch.arange(6, dtype=torch.int16).reshape(2, 3) + b + i for i in range(3)],
        lambda b: [(torch.full((3,), float(b + i)), b + i) for i in range(3)],
        lambda b: [[torch.full((3,), float(b + i)), torch.zeros(2, dtype=torch.uint8)] for i in range(3)],
        lambda b: [Pair(torch.full((3,), float(b + i)), i) for i in range(3)],
    ],
    ids=["dicts", "tensors", "tuples", "lists", "namedtuples"],
)
def test_values_equal_default_collates(make: Any) -> None:
    """Dicts, tensors, tuples, lists and namedtuples collate to default_collate's values and types."""
    collate = RingCollate(ring_size=2)
    for b in range(5):
        assert_same(collate(make(b)), default_collate(make(b)))


@pytest.mark.parametrize("ring_size", [2, 3, 5])
def test_the_latest_ring_size_batches_are_never_overwritten(ring_size: int) -> None:
    """The batch just collated and the ``ring_size - 1`` before it keep their values while more are drawn."""
    collate = RingCollate(ring_size=ring_size)
    held: deque[tuple[int, dict[str, Any]]] = deque(maxlen=ring_size)
    for b in range(4 * ring_size + 1):
        held.append((b, collate(items(b))))
        for number, batch in held:
            assert_same(batch, default_collate(items(number)))


@pytest.mark.parametrize("ring_size", [2, 4])
def test_buffers_are_reused_after_ring_size_batches(ring_size: int) -> None:
    """Batch ``k + ring_size`` lands in batch ``k``'s memory; the ``ring_size`` batches in between do not."""
    collate = RingCollate(ring_size=ring_size)
    pointers = [collate(items(b))["vol"].data_ptr() for b in range(3 * ring_size)]
    assert len(set(pointers[:ring_size])) == ring_size
    assert pointers[ring_size:] == pointers[:-ring_size]
    plain = RingCollate(ring_size=ring_size)
    tensors = [torch.zeros(8) for _ in range(4)]
    assert plain(tensors).data_ptr() != plain(tensors).data_ptr()
    assert len({plain(tensors).data_ptr() for _ in range(3 * ring_size)}) == ring_size


def test_a_changed_shape_or_dtype_gets_a_new_buffer_and_old_batches_stay_intact() -> None:
    """A new item shape or dtype reallocates that slot's buffer; batches collated before keep theirs."""
    collate = RingCollate(ring_size=2)
    small, big = collate(items(0, size=4)), collate(items(1, size=8))
    assert big["vol"].shape == (3, 8, 2)
    doubles = collate([{"vol": torch.full((4, 2), 7.0, dtype=torch.float64)}] * 3)
    assert doubles["vol"].dtype == torch.float64 and doubles["vol"].data_ptr() != small["vol"].data_ptr()
    assert_same(small, default_collate(items(0, size=4)))
    assert_same(big, default_collate(items(1, size=8)))
    again = collate(items(3, size=8))
    assert again["vol"].data_ptr() == big["vol"].data_ptr()  # same shape, same slot: reused


def test_a_shorter_batch_uses_the_first_rows_of_its_buffer() -> None:
    """The short last batch of an epoch reuses the slot's buffer; a longer batch reallocates it."""
    collate = RingCollate(ring_size=2)
    full = collate(items(0, n=4))["vol"].data_ptr()
    collate(items(1, n=4))
    short = collate(items(2, n=3))
    assert short["vol"].data_ptr() == full and short["vol"].shape == (3, 4, 2)
    assert_same(short, default_collate(items(2, n=3)))
    collate(items(3, n=4))
    longer = collate(items(4, n=5))
    assert longer["vol"].shape == (5, 4, 2)
    assert_same(longer, default_collate(items(4, n=5)))


def test_what_cannot_be_stacked_is_collated_like_dict_collate() -> None:
    """Unequal shapes become a list with DictCollate's warning; strings a list; ``keys`` filters."""
    collate = RingCollate(keys=["vol", "name"])
    data = [{"vol": torch.zeros(2), "name": "a", "x": 1}, {"vol": torch.zeros(3), "name": "b", "x": 2}]
    with pytest.warns(RuntimeWarning, match=r"cannot stack key 'vol': its tensors have shapes"):
        batch = collate(data)
    assert list(batch) == ["vol", "name"] and isinstance(batch["vol"], list) and batch["name"] == ["a", "b"]


def test_tensors_that_require_grad_are_stacked_by_allocating() -> None:
    """``out=`` refuses autograd, so such tensors are stacked into a new tensor that keeps its graph."""
    leaf = torch.ones(3, requires_grad=True)
    batch = RingCollate()([leaf, leaf * 2])
    assert batch.requires_grad and batch.grad_fn is not None


def test_pin_memory_is_a_no_op_without_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no accelerator, ``pin_memory=True`` gives ordinary buffers (and no error)."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    batch = RingCollate(pin_memory=True)(items(0))
    assert not batch["vol"].is_pinned()
    assert_same(batch, default_collate(items(0)))


@pytest.mark.skipif(not torch.accelerator.is_available(), reason="needs an accelerator")
def test_pin_memory_pins_the_buffers_with_an_accelerator() -> None:
    """With an accelerator, the ring's buffers are pinned and still reused."""
    collate = RingCollate(ring_size=2, pin_memory=True)
    first = collate(items(0))["vol"]
    assert first.is_pinned()
    collate(items(1))
    assert collate(items(2))["vol"].data_ptr() == first.data_ptr()


def test_a_pickled_copy_starts_with_an_empty_ring() -> None:
    """Copies sent to worker processes carry the settings, not the buffers."""
    collate = RingCollate(ring_size=3, keys=["vol"])
    collate(items(0))
    copy = pickle.loads(pickle.dumps(collate))
    assert repr(copy) == "RingCollate(ring_size=3, keys=['vol'], pin_memory=False)"
    assert all(not slot for slot in copy._ring)
    assert_same(copy(items(1)), {"vol": default_collate(items(1))["vol"]})


def test_bad_arguments_are_refused() -> None:
    """A ring of fewer than 2 buffers, an empty batch and a non-item are errors that say so."""
    with pytest.raises(ValueError, match="ring_size must be an int >= 2"):
        RingCollate(ring_size=1)
    with pytest.raises(ValueError, match="empty list"):
        RingCollate()([])
    with pytest.raises(TypeError, match="needs dict, tensor or tuple items, got int"):
        RingCollate()([1, 2])
    with pytest.raises(TypeError, match="tuple or list items of one length"):
        RingCollate()([(1, 2), (1,)])
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        RingCollateSpec.model_validate({"ring_size": 1})


def test_ring_kind_through_build_loader() -> None:
    """``collate: {kind: ring}`` in the torch loader yields default_collate's batches from reused buffers."""
    dataset = Batches(6, n=4)
    config = {
        "loader": {
            "kind": "torch",
            "batch_size": 4,
            "collate": {"kind": "ring", "ring_size": 3, "keys": ["vol", "label"]},
        }
    }
    with loaderfactory.build_loader(config, dataset=dataset) as loader:
        collate = loader["loader"].collate_fn
        assert isinstance(collate, RingCollate) and (collate.ring_size, collate.keys) == (3, ["vol", "label"])
        held: deque[dict[str, Any]] = deque(maxlen=3)
        pointers = []
        for b, batch in enumerate(loader):
            held.append(batch)
            pointers.append(batch["vol"].data_ptr())
            for age, old in enumerate(reversed(held)):
                expected = default_collate(items(b - age, n=4))
                assert_same(old, {"vol": expected["vol"], "label": expected["label"]})
    assert len(pointers) == 6 and pointers[3:] == pointers[:3]


def test_worker_processes_reuse_shared_buffers_within_the_window() -> None:
    """Workers keep ``(ring_size - prefetch_factor) * num_workers`` batches intact, in shared memory."""
    ring_size, prefetch, workers = 4, 2, 2
    window = (ring_size - prefetch) * workers
    collate = RingCollate(ring_size)
    loader = DataLoader(
        Batches(12), batch_size=3, num_workers=workers, prefetch_factor=prefetch, collate_fn=collate
    )
    held: deque[tuple[int, dict[str, Any]]] = deque(maxlen=window)
    pointers = []
    for b, batch in enumerate(loader):
        held.append((b, batch))
        assert batch["vol"].is_shared()
        for number, old in held:
            assert_same(old, default_collate(items(number)))
        if b < ring_size * workers:
            pointers.append((batch["vol"].data_ptr(), batch))  # keep each alive: torch maps its memory once
        else:
            assert batch["vol"].data_ptr() == pointers[b - ring_size * workers][0]


class CountingCollate:
    """Wraps a collate function and lets a test wait until it has been called ``n`` times."""

    def __init__(self, collate: RingCollate) -> None:
        self.collate, self.calls, self.changed = collate, 0, threading.Condition()

    def __call__(self, batch: list[Any]) -> Any:
        collated = self.collate(batch)
        with self.changed:
            self.calls += 1
            self.changed.notify_all()
        return collated

    def wait_for_calls(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.calls >= n, timeout=30)


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_ring_of_buffer_size_plus_two_is_safe_behind_a_thread_buffer(buffer_size: int) -> None:
    """Behind a ThreadBuffer of ``b``, the batch in hand survives the producer running as far as it may."""
    batches = 8
    counting = CountingCollate(RingCollate(ring_size=buffer_size + 2))
    loader = DataLoader(Batches(batches), batch_size=3, collate_fn=counting)
    with ThreadBuffer(loader, buffer_size=buffer_size) as buffer:
        for b, batch in enumerate(buffer):
            # b + buffer_size + 2 calls: ``buffer_size`` batches queued and one blocked on the queue.
            counting.wait_for_calls(min(b + buffer_size + 2, batches))
            assert_same(batch, default_collate(items(b)))
