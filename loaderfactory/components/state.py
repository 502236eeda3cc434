"""The state protocol every pipeline component follows, so a stopped run resumes exactly.

A component's ``state_dict()`` describes where it stands *as its consumer sees it*: a freshly
built, identical component given that state by ``load_state_dict()`` yields exactly what the
original would have yielded next. States are plain JSON data (dicts, lists, str, int, float,
bool, None). A loaded state takes effect at the next ``iter()``; until then ``state_dict()``
returns it unchanged.

Stages that read ahead of their consumer (a prefetch thread, a buffered stream, worker
processes) have run their upstream further than the consumer got. They implement
``bind_upstream_state(fn)``: ``fn()`` returns the state of every slot before them, and they call
it right after pulling each item (on the thread that pulls), keep that snapshot next to the item,
and report the snapshot of the last item their consumer took under :data:`UPSTREAM`.
:class:`~loaderfactory.loader.Loader` binds the hook and restores each slot from those snapshots.

A stage that shards records ``world_size`` and ``rank`` and refuses a state saved for other
values with :func:`check_matching`; any stage does the same for worker counts and for whatever
else decides which items it yields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from loaderfactory.errors import ResumeError

UPSTREAM = "upstream"
"""Key of the upstream snapshot inside the state of a stage that reads ahead."""

UpstreamState = Callable[[], dict[str, Any]]
"""Returns the state of every slot before a stage, as that stage's consumer side sees it."""


@runtime_checkable
class Stateful(Protocol):
    """A component whose position can be saved and restored."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def check_matching(owner: str, state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise :class:`ResumeError` listing every key of ``current`` whose saved value differs.

    Args:
        owner: names the component in the message (``"loader (torch)"``).
        state: the saved state.
        current: the values this component has now (``{"num_workers": 2, "world_size": 4}``).
    """
    differ = [
        f"{key}: saved {state[key]!r}, this one has {value!r}"
        for key, value in current.items()
        if key in state and state[key] != value
    ]
    if differ:
        raise ResumeError(
            f"{owner}: the state was saved by a differently configured component "
            f"({'; '.join(differ)}); build it with the saved settings or start afresh"
        )


def require_keys(owner: str, state: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Raise :class:`ResumeError` when ``state`` lacks one of ``keys`` (not this component's state)."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise ResumeError(
            f"{owner}: not a state of this component (missing {', '.join(missing)}); "
            "was it saved from another slot or another kind?"
        )
