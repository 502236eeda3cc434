"""Small batches leave a worker process by value, in the result message, not as shared memory.

torch sends each tensor of a batch from a worker process as a shared-memory file descriptor, which
the main process fetches over a new authenticated connection to that worker; the worker answers on
a thread that needs its GIL, so on a busy machine each tensor costs about a millisecond, more than
copying a small batch twice. A batch whose tensors add up to at most :data:`BY_VALUE_BYTES` is
therefore copied into the message itself (``benchmarks/bench_batch_transfer.py``: about twice the
batches per second for 32 items of 4 KB). Larger batches, and any batch holding a tensor that is not
a plain dense CPU tensor owning its storage alone (a view, a subclass, one that requires grad, two
tensors sharing memory), go as torch sends them. The main process gets the same structure, with
tensors of the same dtype, shape and strides, writable; they share one buffer per batch.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from contextlib import contextmanager
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from torch.utils.data import DataLoader, get_worker_info

BY_VALUE_BYTES = 512 * 1024
"""The most tensor bytes a batch sent by value holds: around 1 MiB, fetching shared memory gets
cheaper than copying through the pipe (measured on 2 busy cores; see the module docstring)."""
ALIGN = 64
"""Each tensor's offset in the batch's buffer: aligned for every dtype and for vector loads."""

_Layout = tuple[int, torch.dtype, tuple[int, ...]]
"""Where a tensor lies in the batch's buffer: (offset, dtype, shape)."""


class ByValueCollate:
    """``collate``, whose batches a worker process sends by value when they are small (see the module)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, items: Any) -> Any:
        batch = self.collate(items)
        return SmallBatch(batch) if get_worker_info() is not None else batch


@contextmanager
def small_batches_by_value(loader: DataLoader[Any]) -> Any:
    """While torch starts ``loader``'s pass (its iterator reads ``collate_fn`` then), its worker
    processes collate with :class:`ByValueCollate`; ``loader.collate_fn`` stays the user's. Not for a
    collate that reuses shared buffers itself (``shares_worker_buffers``, as ``RingCollate``)."""
    collate = loader.collate_fn
    if (
        loader.num_workers == 0
        or collate is None
        or isinstance(collate, ByValueCollate)
        or getattr(collate, "shares_worker_buffers", False)
    ):
        yield
        return
    loader.collate_fn = ByValueCollate(collate)
    try:
        yield
    finally:
        loader.collate_fn = collate


class _NotByValue(Exception):
    """A tensor that must go as torch sends it, or the batch is too large: send it all that way."""


class _TensorsAside(ForkingPickler):
    """Pickles a batch's structure, setting its tensors aside (by position) for one buffer."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.tensors: list[torch.Tensor] = []
        self.storages: set[int] = set()
        self.total = 0

    def persistent_id(self, obj: Any) -> int | None:
        if not isinstance(obj, torch.Tensor):
            return None
        storage = obj.untyped_storage().data_ptr()
        if not _plain(obj) or (obj.nbytes and storage in self.storages):
            raise _NotByValue
        self.storages.add(storage)
        self.total = _aligned(self.total) + obj.nbytes
        if self.total > BY_VALUE_BYTES:
            raise _NotByValue
        self.tensors.append(obj)
        return len(self.tensors) - 1


def _plain(tensor: torch.Tensor) -> bool:
    """A dense CPU tensor of torch's own type that is all of its storage, as a collate makes them."""
    return (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.layout is torch.strided
        and not (tensor.requires_grad or tensor.is_quantized or tensor.is_conj() or tensor.is_neg())
        and not any(getattr(tensor, "names", ()))  # named tensors, where torch still has them
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.nbytes
    )


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class SmallBatch:
    """A collated batch on its way out of a worker: pickled by value when small, else as torch does."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[Any, ...]:
        file = io.BytesIO()
        pickler = _TensorsAside(file)
        try:
            pickler.dump(self.batch)
        except Exception:  # noqa: BLE001  # _NotByValue; anything else fails again, as it would, below
            return _as_sent, (self.batch,)
        layout: list[_Layout] = []
        offset = 0
        for tensor in pickler.tensors:
            offset = _aligned(offset)
            layout.append((offset, tensor.dtype, tuple(tensor.shape)))
            offset += tensor.nbytes
        data = bytearray(offset)
        if offset:
            flat = torch.frombuffer(data, dtype=torch.uint8)
            for (start, _, _), tensor in zip(layout, pickler.tensors, strict=True):
                flat[start : start + tensor.nbytes] = tensor.reshape(-1).view(torch.uint8)
        return _rebuilt, (file.getvalue(), bytes(data), layout)


def _as_sent(batch: Any) -> Any:
    return batch


class _TensorsBack(pickle.Unpickler):
    def __init__(self, structure: bytes, data: bytes, layout: list[_Layout]) -> None:
        super().__init__(io.BytesIO(structure))
        self.flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else None
        self.layout = layout

    def persistent_load(self, pid: Any) -> torch.Tensor:
        start, dtype, shape = self.layout[pid]
        size = torch.Size(shape)
        nbytes = size.numel() * dtype.itemsize
        if nbytes == 0 or self.flat is None:
            return torch.empty(size, dtype=dtype)
        return self.flat[start : start + nbytes].view(dtype).view(size)


def _rebuilt(structure: bytes, data: bytes, layout: list[_Layout]) -> Any:
    """The batch a worker's :class:`SmallBatch` held, in the main process."""
    return _TensorsBack(structure, data, layout).load()
