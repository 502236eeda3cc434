"""Spec of the ``epochs`` stream kind (:class:`~loaderfactory.components.stream.wrapper.StreamWrapper`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, model_validator

from loaderfactory.config.specs.base import Timeout, alias, refuse_unless
from loaderfactory.config.specs.kinds import StageKindSpec


class StreamWrapperSpec(StageKindSpec):
    """Cut the loader's batches into epochs of ``epoch_size`` (restarting it at its end), optionally buffered.

    ``epoch_size <= 0`` keeps one pass per epoch. ``buffer_size >= 1`` produces that many batches
    ahead on one thread (costs the thread and the batches' memory); ``timeout`` is then the stall
    deadline, and ``gated`` lets the producer run only inside ``allow_buffering`` or while the
    consumer waits.
    """

    speed_only = frozenset({"buffer_size", "timeout", "gated", "name"})

    kind: Literal["epochs"] = "epochs"
    buffer_size: NonNegativeInt = Field(0, validation_alias=alias("buffer_size", "buffer"))
    """Batches produced ahead on a background thread; 0 produces on the consumer's thread."""
    epoch_size: int = Field(-1, ge=-1, validation_alias=alias("epoch_size", "epoch_len"))
    """Batches per epoch; ≤ 0: one pass of the loader."""
    name: str = Field("stream", min_length=1)
    """Names the producer thread, the report entry and error messages."""
    timeout: Timeout = None
    """Seconds to wait for the next buffered batch before a StallError; ``null``: forever. Needs a buffer."""
    gated: bool = False
    """Produce only while the consumer waits or holds ``allow_buffering``; needs a buffer."""

    def read_ahead(self) -> tuple[int, str]:
        if self.buffer_size == 0:
            return 0, ""
        # A ThreadBuffer's thread: it pulls a batch, then waits for room to queue it.
        return (
            self.buffer_size + 1,
            f"buffer_size={self.buffer_size}: {self.buffer_size} queued + 1 its thread holds",
        )

    @model_validator(mode="after")
    def _thread_options_need_a_buffer(self) -> StreamWrapperSpec:
        """timeout and gated need buffer_size >= 1."""
        refuse_unless(
            self.buffer_size > 0,
            type(self).__name__,
            {"timeout": self.timeout, "gated": self.gated},
            "needs the producer thread, but buffer_size is 0; set buffer_size >= 1",
        )
        return self
