"""Where this process stands among data-parallel processes: read once, at build time, here at the edge."""

from __future__ import annotations

import os

import torch.distributed as dist

from loaderfactory.config.specs.sharded import DistributedSpec
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
