"""The state protocol every pipeline component follows, so a stopped run resumes exactly.

One protocol, nested like ``torchdata.nodes``:

- **Every component** offers ``state_dict()``: where it stands *as its consumer sees it*, as plain
  JSON data; and ``load_state_dict(state)``: a freshly built, identical component given that state
  yields exactly what the original would have yielded next. A loaded state takes effect at the
  next ``iter()``; until then ``state_dict()`` returns it.
- **Cheap snapshots** (optional, :class:`Snapshots`): ``state_snapshot()`` returns a small immutable
  value of what changes per item (a few attribute reads), and ``state_from_snapshot(snapshot)``
  the ``state_dict()`` it stood for. A component whose ``state_dict()`` costs more offers them;
  for any other one its ``state_dict()`` is its snapshot.
- **Stages that read ahead** (a prefetch thread, a buffered stream) have run their upstream further
  than their consumer got. They offer ``track_upstream(upstream)`` (:class:`ReadsAhead`), take
  ``upstream.state_snapshot()`` right after pulling each item (on the thread that pulls), keep it
  next to the item, and nest ``upstream.state_from_snapshot()`` of the last item their consumer
  took under :data:`UPSTREAM` in their own state; their own snapshot holds that upstream snapshot.

:class:`~loaderfactory.loader.Loader` hands each stage that reads ahead the slots before it as one
:class:`Snapshots` (keyed by slot), and splits the nested state it gets from the last slot into
one state per slot.

A stage that shards records ``world_size`` and ``rank`` and refuses a state saved for other
values with :func:`check_matching`; any stage does the same for worker counts and for whatever
else decides which items it yields.

``load_state_dict()`` checks the state before it changes anything: a state that is not a dict, a
missing field, ``None``, a wrong type or a position outside the epoch raises
:class:`StateFieldError` (a :class:`~loaderfactory.errors.ResumeError`) naming the component and
the field, instead of a ``KeyError`` deep inside, an empty epoch or a silently different order.
:func:`require_state`, :func:`require_keys`, :func:`require_int` and :func:`require_int_list`
keep those checks a few lines per component.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from typing import Any, Protocol, TypeGuard, runtime_checkable

from loaderfactory.errors import ResumeError

UPSTREAM = "upstream"
"""Key of the upstream's state inside the state of a stage that reads ahead."""


@runtime_checkable
class Stateful(Protocol):
    """A component whose position can be saved and restored."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Snapshots(Protocol):
    """Cheap snapshots of a state: one per item, built into a ``state_dict()`` only when asked."""

    def state_snapshot(self) -> Any:
        """A small immutable value of what changes per item; cheap (a stage takes one per item)."""
        ...

    def state_from_snapshot(self, snapshot: Any) -> dict[str, Any]:
        """The ``state_dict()`` the component had when :meth:`state_snapshot` returned ``snapshot``."""
        ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A stage that pulls items before its consumer asks for them."""

    def track_upstream(self, upstream: Snapshots | None) -> None:
        """Keep ``upstream.state_snapshot()`` next to each item pulled, nest its state under
        :data:`UPSTREAM`; ``None``: standalone (a restored stage replays its source)."""
        ...


def replay_length(tracking: bool, sized: object) -> int | None:
    """How many items a read-ahead stage may have been through when it replays its source itself:
    ``len(sized)`` standalone, ``None`` when it tracks an upstream (the slots before are restored
    from their own states and their ``len()`` is not this stage's bound) or for an unsized source."""
    if tracking:
        return None
    try:
        return len(sized)  # type: ignore[arg-type]  # TypeError below when unsized
    except TypeError:
        return None


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


class StateFieldError(ResumeError):
    """A field of a saved state that is missing, ``None``, of the wrong type or out of range.

    A :class:`~loaderfactory.Loader` reports it at the field's path in its own state
    (``slots.loader.state.position``).

    Attributes:
        owner: the component, as its messages name it (``"loader (torch)"``).
        field: the key in the component's state (``"position"``).
        problem: what is wrong with it (``"must be an int in [0, 6], got -1"``).
    """

    def __init__(self, owner: str, field: str, problem: str) -> None:
        super().__init__(f"{owner}: state field {field!r} {problem}")
        self.owner = owner
        self.field = field
        self.problem = problem


def require_state(owner: str, state: object) -> Mapping[str, Any]:
    """``state`` itself, or :class:`ResumeError` when it is not a mapping (``None``, a list, ...)."""
    if not isinstance(state, Mapping):
        raise ResumeError(
            f"{owner}: a state must be a dict (what state_dict() returned), got {type(state).__name__}"
        )
    return state


def require_keys(owner: str, state: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Raise :class:`StateFieldError` naming the first of ``keys`` that ``state`` lacks."""
    missing = [k for k in keys if k not in state]
    if missing:
        others = f" (so are {', '.join(repr(k) for k in missing[1:])})" if missing[1:] else ""
        raise StateFieldError(
            owner,
            missing[0],
            f"is missing{others}: not a state of this component; "
            "was it saved from another slot or another kind?",
        )


def require_int(
    owner: str, state: Mapping[str, Any], key: str, low: int | None = 0, high: int | None = None
) -> int:
    """``state[key]`` as an ``int`` in ``[low, high]`` (``None``: unbounded), or :class:`StateFieldError`.

    ``bool``, ``float`` (even ``2.0``), ``str`` and ``None`` are refused: a saved position is an int.
    """
    require_keys(owner, state, (key,))
    value = state[key]
    if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise StateFieldError(owner, key, f"must be an int{_bounds(low, high)}, got {value!r}")
    return int(value)


def require_int_list(
    owner: str,
    state: Mapping[str, Any],
    key: str,
    low: int | None = 0,
    high: int | None = None,
    max_length: int | None = None,
) -> list[int]:
    """``state[key]`` as a list of ints in ``[low, high]``, at most ``max_length`` of them."""
    require_keys(owner, state, (key,))
    value = state[key]
    if max_length == 0:
        wanted = "an empty list"
    else:
        at_most = "" if max_length is None else f"at most {max_length} "
        wanted = f"a list of {at_most}ints{_bounds(low, high)}"
    if not isinstance(value, list | tuple):
        raise StateFieldError(owner, key, f"must be {wanted}, got {value!r}")
    if max_length is not None and len(value) > max_length:
        raise StateFieldError(owner, key, f"must be {wanted}, got {len(value)} entries")
    for number, item in enumerate(value):
        if not _is_int(item) or (low is not None and item < low) or (high is not None and item > high):
            raise StateFieldError(owner, key, f"must be {wanted}; entry {number} is {item!r}")
    return [int(item) for item in value]


def _is_int(value: object) -> TypeGuard[int]:
    # numpy integers count (Integral); bool is an int to Python but never a saved count.
    return isinstance(value, Integral) and not isinstance(value, bool)


def _bounds(low: int | None, high: int | None) -> str:
    """`` in [low, high]``, `` >= low``, `` <= high`` or nothing."""
    if high is None:
        return "" if low is None else f" >= {low}"
    if low is None:
        return f" <= {high}"
    return f" in [{low}, {high}]"
