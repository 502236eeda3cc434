"""Spec of the ``thread`` prefetch kind (:class:`~loaderfactory.components.thread.buffer.ThreadBuffer`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loaderfactory.config.specs.base import BufferSize, Repeats, Timeout, alias
from loaderfactory.config.specs.kinds import StageKindSpec


class ThreadBufferSpec(StageKindSpec):
    """Prefetch on one background thread so the training step rarely waits for data.

    Costs one thread and ``buffer_size`` batches of memory. ``repeats`` > 1 echoes each batch
    (data echoing) while the next one loads; echoes are copies unless ``copy_echoes`` is false.
    """

    speed_only = frozenset({"buffer_size", "timeout"})

    kind: Literal["thread"] = "thread"
    buffer_size: BufferSize = 1
    """Batches fetched ahead of the consumer."""
    timeout: Timeout = Field(None, validation_alias=alias("timeout", "buffer_timeout"))
    """Stall deadline in seconds for the next batch; null waits forever."""
    repeats: Repeats = 1
    """Yield each batch this many times (data echoing)."""
    copy_echoes: bool = True
    """Echoes are copies, so in-place edits never leak between them."""

    def read_ahead(self) -> tuple[int, str]:
        # The thread pulls a batch, then waits for room to queue it: one more than the buffer.
        return (
            self.buffer_size + 1,
            f"buffer_size={self.buffer_size}: {self.buffer_size} queued + 1 its thread holds",
        )
