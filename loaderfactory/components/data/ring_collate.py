"""``RingCollate``: stack batches into a ring of reused buffers instead of allocating each one."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info

from loaderfactory.components.data.collate import DictCollate, KeyFilter

_Slot = dict[Hashable, torch.Tensor]


class RingCollate(DictCollate):
    """Collate like :class:`DictCollate`, but stack tensors into a ring of ``ring_size`` reused buffers.

    Stacking 32 items of 1 MiB into a fresh tensor spends most of its time having the new 32 MiB
    mapped and faulted in; stacking into a buffer that is already there runs at memory speed
    (``benchmarks/bench_collate.py``: several times faster). The price is a lifetime rule, as in
    other high-speed loaders: **a batch stays valid until ``ring_size`` more batches are collated
    by this function**; the ``ring_size``-th next call overwrites its tensors. It suits consumers
    that copy or consume each batch before drawing ``ring_size`` more (moving it to the GPU, a
    training step); keep one longer with ``batch["vol"].clone()``. Costs ``ring_size`` batches
    of memory, held for the collate's life.

    The window counts calls to this function, so ``ring_size`` must cover every batch between it and
    the consumer: with ``num_workers=0`` only the batch in hand (``ring_size >= 2``); behind a
    ``ThreadBuffer`` of ``buffer_size=b`` the ``b`` queued batches and the one being produced
    (``ring_size >= b + 2``); in thread workers each worker's batch in progress and the batches
    read ahead. In worker processes each worker has its own ring, allocated in shared memory so
    torch hands the consumer a handle instead of copying; a worker runs up to ``prefetch_factor``
    of its batches ahead, so a batch there stays valid for ``(ring_size - prefetch_factor) *
    num_workers`` draws (keep ``ring_size > prefetch_factor``; with ``in_order=False`` count on
    ``ring_size - prefetch_factor`` draws only).

    Items may be dicts (each key collated; ``keys`` filters them, as in ``DictCollate``), tensors,
    or tuples and lists (collated by position into a list, a namedtuple into its own type).
    Tensors of one shape, dtype and device go into the ring (numbers and numpy arrays too, turned
    into tensors first); anything else (strings, tensors of different shapes, tensors that require
    grad) is collated as ``DictCollate`` does, allocating. A buffer is allocated on first use and again
    when the item shape, dtype or device changes or the batch grows; a shorter batch (the last
    of an epoch) uses the first rows of the buffer it has.

    Args:
        ring_size: buffer sets in the ring (≥ 2): the number of batches that stay valid together.
        keys: keep only these keys of dict items (a list, or a predicate called with each key);
            ``None`` keeps all.
        pin_memory: allocate the buffers in pinned (page-locked) memory, for fast and asynchronous
            host-to-device copies; only where an accelerator is present and outside worker
            processes (whose batches torch moves to shared memory), a no-op elsewhere. An
            asynchronous copy (``non_blocking=True``) must finish before ``ring_size`` more batches
            are drawn; a training step that synchronises makes sure of it.
    """

    shares_worker_buffers = True
    """In worker processes the ring is in shared memory, sent as handles: never copy its batches."""

    def __init__(self, ring_size: int = 4, keys: KeyFilter = None, pin_memory: bool = False) -> None:
        if isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size < 2:
            raise ValueError(f"ring_size must be an int >= 2 (a batch outlives the next), got {ring_size!r}")
        super().__init__(keys)
        self.ring_size = ring_size
        self.pin_memory = pin_memory
        self._reset()

    def _reset(self) -> None:
        self._ring: list[_Slot] = [{} for _ in range(self.ring_size)]
        self._next = 0
        self._lock = threading.Lock()  # thread workers collate concurrently; each call takes its own slot

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to a worker process starts with an empty ring of its own: buffers (and a
        # lock) do not pickle usefully, and pinned memory must not be shared.
        state = self.__dict__.copy()
        for name in ("_ring", "_next", "_lock"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __call__(self, items: Sequence[Any]) -> Any:
        if not items:
            raise ValueError("cannot collate an empty list of items")
        with self._lock:
            slot = self._ring[self._next]
            self._next = (self._next + 1) % self.ring_size
        first = items[0]
        if isinstance(first, torch.Tensor):
            return self._collate(slot, (), "item", list(items))
        if isinstance(first, tuple | list):
            if any(not isinstance(item, tuple | list) or len(item) != len(first) for item in items):
                raise TypeError("RingCollate needs tuple or list items of one length, like the first item")
            columns = [
                self._collate(slot, i, str(i), [self._convert(item[i]) for item in items])
                for i in range(len(first))
            ]
            return type(first)(*columns) if hasattr(first, "_fields") else columns
        for item in items:
            if not isinstance(item, Mapping):
                raise TypeError(f"RingCollate needs dict, tensor or tuple items, got {type(item).__name__}")
        return {
            key: self._collate(slot, key, key, [self._convert(item[key]) for item in items])
            for key in self._present(items)
        }

    def _collate(self, slot: _Slot, key: Hashable, name: str, values: list[Any]) -> Any:
        """Stack ``values`` into ``slot``'s buffer for ``key``, or merge them as ``DictCollate`` does."""
        first = values[0]
        if not (self.stack_tensors and _reusable(first)):
            return self._merge(name, values)
        shape, dtype, device = first.shape, first.dtype, first.device
        for value in values:
            if not (
                isinstance(value, torch.Tensor)
                and value.shape == shape
                and value.dtype == dtype
                and value.device == device
                and _reusable(value)
            ):
                return self._merge(name, values)
        n = len(values)
        buffer = slot.get(key)
        if (
            buffer is None
            or buffer.shape[1:] != shape
            or buffer.shape[0] < n
            or buffer.dtype != dtype
            or buffer.device != device
        ):
            buffer = slot[key] = self._allocate((n, *shape), dtype, device)
        out = buffer if buffer.shape[0] == n else buffer[:n]
        return torch.stack(values, out=out)

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if device.type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device)
        if get_worker_info() is not None:
            # Torch moves a worker's batch to shared memory before sending it, a copy each time;
            # a buffer already there is sent as a handle (the same idea as default_collate's).
            shared: torch.Tensor = torch.empty(shape, dtype=dtype).share_memory_()  # type: ignore[no-untyped-call]  # untyped in torch
            return shared
        pin = self.pin_memory and torch.accelerator.is_available()
        return torch.empty(shape, dtype=dtype, pin_memory=pin)

    def __repr__(self) -> str:
        return f"RingCollate(ring_size={self.ring_size}, keys={self.keys!r}, pin_memory={self.pin_memory})"


def _reusable(value: Any) -> bool:
    """A dense tensor that ``torch.stack(..., out=)`` accepts (autograd refuses ``out=``)."""
    return (
        isinstance(value, torch.Tensor)
        and value.layout == torch.strided
        and not value.is_nested
        and not (value.requires_grad and torch.is_grad_enabled())
    )
