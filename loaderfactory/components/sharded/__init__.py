"""The ``sharded`` loader: shard plans and :class:`ShardedDataLoader` on the shared worker pools."""

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
from loaderfactory.components.workers.info import WorkerInfo, get_worker_info
from loaderfactory.components.workers.remote import WorkerTraceback

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
