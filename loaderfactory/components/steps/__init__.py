"""The ``sharded`` loader kind: :class:`ShardedDataLoader` loads steps, each one batch or one batch per
device (gluon-nlp's shards of a step), with ranks taking parts of one order, on the shared worker pools.

Not to be confused with :mod:`loaderfactory.shards`, which streams samples from shard files.
"""

from loaderfactory.components.steps.loader import ShardedDataLoader
from loaderfactory.components.steps.sampling import EpochPlan, ShardPlanner, count_steps, cut_steps
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
