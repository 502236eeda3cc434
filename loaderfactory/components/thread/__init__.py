"""Background prefetch on one thread: :class:`ThreadBuffer` and :class:`ThreadDataLoader`."""

from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.components.thread.loader import ThreadDataLoader

__all__ = ["ThreadBuffer", "ThreadDataLoader"]
