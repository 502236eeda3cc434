"""Builder of the ``torch`` loader kind."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import IterableDataset

from loaderfactory.builders import BuildContext
from loaderfactory.builders.distributed import resolve_distributed
from loaderfactory.builders.helpers import build_helper
from loaderfactory.builders.targets import instantiate_target, instantiate_with_dataset
from loaderfactory.components.data.sources import as_dataset
from loaderfactory.components.data.stacked import default_collate
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.errors import ArgumentError, ConfigError, ConfigProblem


def build_torch_loader(spec: TorchLoaderSpec, upstream: Any, context: BuildContext) -> ResumableDataLoader:
    # A DataLoader whose sampling is a function of (seed, epoch), so a run can stop and resume.
    seed = spec.seed if spec.seed is not None else context.seed
    collate = build_helper("collate", spec.collate, "loader.collate")
    pin_memory = spec.pin_memory and torch.accelerator.is_available()
    if context.batched:
        # The upstream (a queue) draws whole batches itself: pass them on unbatched.
        _refuse_batching_options(spec)
        return ResumableDataLoader(
            upstream, batch_size=None, seed=seed, collate_fn=collate, pin_memory=pin_memory
        )
    try:
        dataset = as_dataset(upstream)
    except TypeError as err:
        raise ConfigError(ConfigProblem("dataset", str(err))) from err
    if spec.shuffle and isinstance(dataset, IterableDataset):
        raise ConfigError(
            ConfigProblem("loader.shuffle", "cannot shuffle an iterable dataset; set it to false")
        )
    rank, world_size = resolve_distributed(spec.distributed)
    samplers = {
        name: instantiate_with_dataset(getattr(spec, name), f"loader.{name}", upstream)
        for name in ("sampler", "batch_sampler")
        if getattr(spec, name) is not None
    }
    _check_ranks(dataset, samplers, world_size)
    if world_size > 1 and samplers:
        rank, world_size = 0, 1  # a DistributedSampler of the user's splits the data itself
    kwargs: dict[str, Any] = {}
    if spec.num_workers > 0:
        kwargs.update(
            prefetch_factor=spec.prefetch_factor,
            persistent_workers=spec.persistent_workers,
            timeout=spec.timeout or 0,
            multiprocessing_context=spec.multiprocessing_context,
            in_order=spec.in_order,
        )
        if spec.worker_init_fn is not None:
            kwargs["worker_init_fn"] = instantiate_target(spec.worker_init_fn, "loader.worker_init_fn")
    if pin_memory and spec.pin_memory_device is not None:
        kwargs["pin_memory_device"] = spec.pin_memory_device
    try:
        return ResumableDataLoader(
            dataset,
            batch_size=spec.batch_size,
            shuffle=spec.shuffle,
            drop_last=spec.drop_last,
            seed=seed,
            rank=rank,
            world_size=world_size,
            balance=spec.balance,
            num_workers=spec.num_workers,
            collate_fn=collate or (default_collate if _batches(spec, samplers) else None),
            pin_memory=pin_memory,
            **samplers,
            **kwargs,
        )
    except ArgumentError as err:  # the spec checked every rule it could; what is left is about the dataset
        raise ConfigError(ConfigProblem(f"loader.{err.argument}", str(err))) from err


def _batches(spec: TorchLoaderSpec, samplers: dict[str, Any]) -> bool:
    """Whether the DataLoader makes batches (collates lists of items), not items one by one."""
    return spec.batch_size is not None or "batch_sampler" in samplers


def _check_ranks(dataset: Any, samplers: dict[str, Any], world_size: int) -> None:
    """Refuse what would give every rank the same data under ``torch.distributed``."""
    if world_size == 1:
        return
    if isinstance(dataset, IterableDataset):
        raise ConfigError(
            ConfigProblem(
                "loader.distributed",
                f"under torch.distributed (world size {world_size}) every rank would read the whole "
                "iterable dataset; split it by rank in the dataset and set distributed: off, or use a "
                "map-style dataset, which the loader splits",
            )
        )
    for name, sampler in samplers.items():
        inner = getattr(sampler, "sampler", sampler)
        if not hasattr(sampler, "num_replicas") and not hasattr(inner, "num_replicas"):
            raise ConfigError(
                ConfigProblem(
                    f"loader.{name}",
                    f"under torch.distributed (world size {world_size}) a {type(sampler).__name__} gives "
                    "every rank the same indices; use torch.utils.data.DistributedSampler, loader=sharded "
                    "(which splits any sampler's order between ranks), or set distributed: off",
                )
            )


def _refuse_batching_options(spec: TorchLoaderSpec) -> None:
    """The spec's own rules for following a queue (see ``Spec.refuse_after_batches``)."""
    problems = spec.refuse_after_batches(None)
    if problems:
        raise ConfigError([ConfigProblem(f"loader.{field}", message) for field, message, _ in problems])
