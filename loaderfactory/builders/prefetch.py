"""Builder of the ``thread`` prefetch kind."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext, spec_arguments
from loaderfactory.components.thread.buffer import ThreadBuffer
from loaderfactory.config.specs.prefetch import ThreadBufferSpec


def build_thread_buffer(spec: ThreadBufferSpec, upstream: Any, context: BuildContext) -> ThreadBuffer[Any]:
    return ThreadBuffer(upstream, name="prefetch (thread)", **spec_arguments(spec))
