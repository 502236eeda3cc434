"""Background prefetch on one thread: :class:`ThreadBuffer` and :class:`ThreadDataLoader`."""

from loaderfactory.components.thread.buffer import ThreadBuffer, ThreadDataLoader

__all__ = ["ThreadBuffer", "ThreadDataLoader"]
