"""Builder of the ``sharded`` loader kind; reads the distributed environment once, here at the edge."""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

import torch.distributed as dist
from torch.utils.data import IterableDataset

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.sharded import ShardedDataLoader
from loaderfactory.config.specs.sharded import DistributedSpec, SamplerTargetSpec, ShardedLoaderSpec
from loaderfactory.config.specs.target import resolve_target
from loaderfactory.errors import ConfigError, ConfigProblem


def detect_distributed() -> tuple[int, int]:
    """``(rank, world_size)`` of an initialised process group, else torchrun's environment, else ``(0, 1)``.

    torchrun sets ``RANK`` and ``WORLD_SIZE``; they are read here, once, when the loader is built.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world_size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world_size is None:
        return 0, 1
    try:
        found = int(rank), int(world_size)
    except ValueError:
        found = (-1, 0)
    if not (found[1] >= 1 and 0 <= found[0] < found[1]):
        raise ConfigError(
            ConfigProblem(
                "loader.distributed",
                f"auto reads RANK={rank!r} and WORLD_SIZE={world_size!r} from the environment, which are not "
                "a rank in [0, world_size); fix them, or set distributed to off or {rank, world_size}",
            )
        )
    return found


def resolve_distributed(setting: str | DistributedSpec) -> tuple[int, int]:
    """The rank and world size a ``distributed`` setting stands for."""
    if isinstance(setting, DistributedSpec):
        return setting.rank, setting.world_size
    if setting == "off":
        return 0, 1
    return detect_distributed()


def build_sharded_loader(spec: ShardedLoaderSpec, upstream: Any, context: BuildContext) -> ShardedDataLoader:
    if context.batched:
        problems = spec.refuse_after_batches(None)
        raise ConfigError([ConfigProblem(f"loader.{field}", message) for field, message, _ in problems])
    if isinstance(upstream, IterableDataset):
        raise ConfigError(
            ConfigProblem(
                "loader.kind", "sharded needs a map-style dataset (indexable); this one is iterable"
            )
        )
    rank, world_size = resolve_distributed(spec.distributed)
    sampler = _build_sampler(spec.sampler, upstream, "loader.sampler")
    batch_sampler = _build_sampler(spec.batch_sampler, upstream, "loader.batch_sampler")
    collate = build_helper("collate", spec.collate)
    try:
        return ShardedDataLoader(
            upstream,
            spec.batch_size,
            shuffle=spec.shuffle,
            sampler=sampler,
            last_batch=spec.last_batch,
            batch_sampler=batch_sampler,
            collate=collate,
            num_workers=spec.num_workers,
            worker_type=spec.worker_type,
            pin_memory=spec.pin_memory,
            prefetch=spec.prefetch,
            num_shards=spec.num_shards,
            seed=spec.seed if spec.seed is not None else context.seed,
            rank=rank,
            world_size=world_size,
            balance=spec.balance,
            persistent_workers=spec.persistent_workers,
            timeout=spec.timeout,
            multiprocessing_context=spec.multiprocessing_context,
        )
    except ValueError as err:
        raise ConfigError(ConfigProblem(_config_path(str(err)), str(err))) from err


def _config_path(message: str) -> str:
    """The field a runtime argument error is about: its message starts with the argument's name."""
    argument = re.split(r"[^a-z_]", message, maxsplit=1)[0]
    if argument in ("rank", "world_size"):
        argument = "distributed"
    return f"loader.{argument}" if argument in ShardedLoaderSpec.model_fields else "loader"


def _build_sampler(spec: SamplerTargetSpec | None, dataset: Any, path: str) -> Any:
    if spec is None:
        return None
    target = resolve_target(spec.target)
    kwargs = spec.kwargs
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]  # builtins without a signature take what is given
    for name in ("data_source", "dataset"):
        if name in parameters and name not in kwargs:
            kwargs[name] = dataset
            break
    try:
        return target(**kwargs)
    except TypeError as err:
        raise ConfigError(ConfigProblem(path, f"{spec.target}({', '.join(kwargs)}): {err}")) from err
