"""The ``sharded`` loader: shard plans and :class:`ShardedDataLoader` on the shared worker pools."""

from loaderfactory.components.sharded.loader import ShardedDataLoader
from loaderfactory.components.sharded.sampling import EpochPlan, ShardPlanner, count_steps, cut_steps
from loaderfactory.components.workers.info import WorkerInfo, get_worker_info
from loaderfactory.components.workers.remote import WorkerTraceback

__all__ = [
    "EpochPlan",
    "ShardPlanner",
    "ShardedDataLoader",
    "WorkerInfo",
    "WorkerTraceback",
    "count_steps",
    "cut_steps",
    "get_worker_info",
]
