"""The seeds' names and signatures, as thin wrappers over loaderfactory's components.

Code written for the designs loaderfactory grew from keeps working by importing from here; new
code should use the components themselves (canonical names, validated by the specs when built
from a config). Each wrapper maps the seed's argument names to ours and nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from loaderfactory.components.queue.dataset import QueueDataset as _QueueDataset
from loaderfactory.components.steps.loader import ShardedDataLoader as _ShardedDataLoader
from loaderfactory.components.steps.sampling import LastBatch, Step

# -- torchvtk: TorchQueueDataset ---------------------------------------------------------------------

TORCHVTK_NAMES = {
    "bs": "batch_size",
    "q_maxlen": "capacity",
    "ram_use": "ram_budget",
    "epoch_len": "epoch_size",
    "sample_tfm": "sample_transforms",
    "batch_tfm": "batch_transforms",
    "preprocess_fn": "preprocess",
    "collate_fn": "collate",
}
"""torchvtk's argument names → :class:`~loaderfactory.components.queue.QueueDataset`'s."""


class TorchQueueDataset(_QueueDataset):
    """torchvtk's ``TorchQueueDataset``: a :class:`~loaderfactory.components.queue.QueueDataset`
    that also takes torchvtk's argument names, as keywords after the dataset.

    ``bs`` is ``batch_size``, ``q_maxlen`` ``capacity``, ``epoch_len`` ``epoch_size``,
    ``sample_tfm`` ``sample_transforms``, ``batch_tfm`` ``batch_transforms``, ``preprocess_fn``
    ``preprocess`` and ``collate_fn`` ``collate``; ``ram_use`` is ``ram_budget`` with torchvtk's
    rule: up to 1 a fraction of available memory, above 1 a budget in MB (``ram_use=1.5`` is
    1.5 MB). Our own names work too, but not two names for one argument. torchvtk's
    ``fill_interval`` and ``filter_fn`` (a path instead of a dataset) have no counterpart.
    """

    def __init__(self, torch_ds: Any, **kwargs: Any) -> None:
        arguments = inspect.signature(_QueueDataset).parameters
        renamed: dict[str, Any] = {}
        for name, value in kwargs.items():
            ours = TORCHVTK_NAMES.get(name, name)
            if ours not in arguments or ours == "dataset":
                raise TypeError(f"TorchQueueDataset got an unexpected argument {name!r}")
            if ours in renamed or (ours != name and ours in kwargs):
                raise TypeError(f"{name!r} and {ours!r} name the same argument; give one")
            renamed[ours] = value
        ram_use = kwargs.get("ram_use")
        if isinstance(ram_use, int | float) and not isinstance(ram_use, bool):
            renamed["ram_budget"] = int(ram_use * 10**6) if ram_use > 1 else float(ram_use)
        super().__init__(torch_ds, **renamed)


# -- gluon-nlp: ShardedDataLoader --------------------------------------------------------------------


class ShardedDataLoader(_ShardedDataLoader):
    """gluon-nlp's ``ShardedDataLoader``, its arguments in its order, on loaderfactory's.

    ``batchify_fn`` is ``collate``; ``thread_pool=True`` is ``worker_type="thread"`` (``False``:
    ``"process"``; ``None``, not given: as ``worker_type`` says); ``last_batch=None`` is ``"keep"``.
    Other keywords are loaderfactory's own (``num_shards``, ``seed``, ``rank``, ``world_size``,
    ``timeout``, ...); see :class:`~loaderfactory.components.steps.ShardedDataLoader`.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = None,
        shuffle: bool = False,
        sampler: Iterable[int] | None = None,
        last_batch: LastBatch | None = None,
        batch_sampler: Iterable[Step] | None = None,
        batchify_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch: int | None = None,
        thread_pool: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if batchify_fn is not None:
            if "collate" in kwargs:
                raise ValueError("collate and batchify_fn name the same argument; give one")
            kwargs["collate"] = batchify_fn
        if thread_pool is not None:
            worker_type = "thread" if thread_pool else "process"
            if kwargs.setdefault("worker_type", worker_type) != worker_type:
                raise ValueError(
                    f"worker_type={kwargs['worker_type']!r} and thread_pool={thread_pool} contradict each "
                    "other; give one"
                )
        super().__init__(
            dataset,
            batch_size,
            shuffle=shuffle,
            sampler=sampler,
            last_batch=last_batch or "keep",
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            pin_memory=pin_memory,
            prefetch=prefetch,
            **kwargs,
        )


# -- MONAI, emloop -----------------------------------------------------------------------------------
# No wrappers needed: ThreadBuffer(src, buffer_size, timeout), ThreadDataLoader(dataset, buffer_size,
# buffer_timeout, num_workers, repeats) and StreamWrapper(stream_fn, buffer_size, epoch_size, name,
# profile) keep MONAI's and emloop's names and argument order. What differs is documented on each
# class: ``timeout`` is a stall deadline (MONAI's is a polling interval) and ``repeats`` echoes copies.
