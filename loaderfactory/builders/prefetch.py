"""Builder of the ``thread`` prefetch kind."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.config.specs.prefetch import ThreadBufferSpec


def build_thread_buffer(spec: ThreadBufferSpec, upstream: Any, context: BuildContext) -> ThreadBuffer[Any]:
    return ThreadBuffer(
        upstream,
        buffer_size=spec.buffer_size,
        timeout=spec.timeout,
        repeats=spec.repeats,
        copy_echoes=spec.copy_echoes,
        name="prefetch (thread)",
    )
