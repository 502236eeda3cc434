"""The ``sharded`` loader: shard plans, worker pools and :class:`ShardedDataLoader`."""

from loaderfactory.components.sharded.loader import ShardedDataLoader
from loaderfactory.components.sharded.sampling import (
    EpochPlan,
    ShardPlanner,
    assign_shards,
    count_steps,
    cut_steps,
    epoch_permutation,
    rank_size,
)
from loaderfactory.components.sharded.workers import WorkerInfo, WorkerTraceback, get_worker_info

__all__ = [
    "EpochPlan",
    "ShardPlanner",
    "ShardedDataLoader",
    "WorkerInfo",
    "WorkerTraceback",
    "assign_shards",
    "count_steps",
    "cut_steps",
    "epoch_permutation",
    "get_worker_info",
    "rank_size",
]
