"""The ``ram`` queue: random batches drawn from items held in memory, refilled by workers."""

from loaderfactory.components.queue.dataset import QueueDataset

__all__ = ["QueueDataset"]
