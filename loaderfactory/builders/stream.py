"""Builder of the ``epochs`` stream kind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from loaderfactory.builders import BuildContext, spec_arguments
from loaderfactory.components.stream.wrapper import StreamWrapper
from loaderfactory.config.specs.stream import StreamWrapperSpec


class _Restart:
    """``stream_fn`` over the slot before: each call is a new pass of it; sized like it."""

    def __init__(self, upstream: Any) -> None:
        self.upstream = upstream

    def __call__(self) -> Iterator[Any]:
        return iter(self.upstream)

    def __len__(self) -> int:
        return len(self.upstream)


def build_stream_wrapper(spec: StreamWrapperSpec, upstream: Any, context: BuildContext) -> StreamWrapper:
    return StreamWrapper(_Restart(upstream), **spec_arguments(spec))
