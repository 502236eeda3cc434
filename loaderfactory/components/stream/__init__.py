"""Fixed-size epochs over a restartable stream, optionally buffered: :class:`StreamWrapper`."""

from loaderfactory.components.stream.wrapper import StreamWrapper

__all__ = ["StreamWrapper"]
