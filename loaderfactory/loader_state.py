"""What a :class:`~loaderfactory.loader.Loader` saves and restores: each slot as a
:class:`~loaderfactory.components.state.Snapshots`, the slots up to one as a :class:`Chain` (what a
stage that reads ahead keeps beside each item), nested states split per slot, and the checks of a
saved state."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from loaderfactory.components.data.sources import is_map_style
from loaderfactory.components.state import UPSTREAM, Snapshots, StateFieldError
from loaderfactory.errors import ResumeError, ResumeWarning


class _Length:
    """A map-style dataset without state: recorded by its length, the same after every item."""

    fixed = True

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def state_snapshot(self) -> None:
        return None

    def state_from_snapshot(self, snapshot: None) -> dict[str, Any]:
        return {"length": len(self.dataset)}


class _Whole:
    """A component without the snapshot pair: its ``state_dict()`` is its snapshot."""

    fixed = False

    def __init__(self, component: Any) -> None:
        self.component = component

    def state_snapshot(self) -> dict[str, Any]:
        return dict(self.component.state_dict())  # a copy: the component may go on changing its own

    def state_from_snapshot(self, snapshot: Mapping[str, Any]) -> dict[str, Any]:
        return dict(snapshot)


class _Unsaveable:
    """A component without the protocol: building its state raises ``ResumeError`` naming the slot.
    (No stage tracks it, so its snapshot is only taken for ``Loader.state_dict()``.)"""

    fixed = False

    def __init__(self, slot: str, component: Any) -> None:
        self.slot, self.component = slot, component

    def state_snapshot(self) -> None:
        return None

    def state_from_snapshot(self, snapshot: None) -> dict[str, Any]:
        return stateful(self.slot, self.component).state_dict()  # type: ignore[no-any-return]  # raises


def slot_snapshots(slot: str, component: Any) -> Snapshots:
    """How the slot's state is taken, chosen once: the component itself where it has the snapshot
    pair, else its ``state_dict()``, its length (a map-style dataset without state), or an error."""
    if is_map_style(component) and not hasattr(component, "state_dict"):
        return _Length(component)
    if isinstance(component, Snapshots):
        return component
    loads = callable(getattr(component, "load_state_dict", None))
    if callable(getattr(component, "state_dict", None)) and (loads or is_map_style(component)):
        return _Whole(component)
    return _Unsaveable(slot, component)


def saveable(snapshots: Snapshots) -> bool:
    return not isinstance(snapshots, _Unsaveable)


class Chain:
    """The slots up to one, as one :class:`~loaderfactory.components.state.Snapshots` whose state is
    ``{slot: state}`` in pipeline order.

    A stage that reads ahead and tracks its upstream holds the slots before it in its own snapshot,
    so the chain starts at the last such stage; slots whose state never changes (a dataset recorded
    by its length) take no snapshot. With one slot left to snapshot, :attr:`state_snapshot` is that
    slot's own method: a stage pulling an item pays for nothing else.

    Args:
        slots: ``(slot, snapshots, tracks)`` in pipeline order; ``tracks``: the slot reads ahead and
            tracks the slots before it.
    """

    def __init__(self, slots: Sequence[tuple[str, Snapshots, bool]]) -> None:
        start = max((n for n, (_, _, tracks) in enumerate(slots) if tracks), default=0)
        self._slots = [
            (slot, snaps, bool(getattr(snaps, "fixed", False))) for slot, snaps, _ in slots[start:]
        ]
        moving = [snaps.state_snapshot for _, snaps, fixed in self._slots if not fixed]
        self._single = len(moving) == 1
        self.state_snapshot: Callable[[], Any] = moving[0] if self._single else _together(moving)

    def state_from_snapshot(self, snapshot: Any) -> dict[str, Any]:
        parts = [snapshot] if self._single else list(snapshot)
        built = {}
        # Nearest the consumer first, so the slot nearest it that cannot be saved raises first.
        for slot, snaps, fixed in reversed(self._slots):
            built[slot] = snaps.state_from_snapshot(None if fixed else parts.pop())
        return {slot: built[slot] for slot, _, _ in self._slots}


def _together(takes: list[Callable[[], Any]]) -> Callable[[], tuple[Any, ...]]:
    def take_all() -> tuple[Any, ...]:
        return tuple(take() for take in takes)

    return take_all


def split_slots(nested: Mapping[str, Any], upstreams: Mapping[str, Snapshots]) -> dict[str, dict[str, Any]]:
    """One state per slot from a :class:`Chain`'s nested state: the :data:`UPSTREAM` of each stage
    that tracks the slots before it (``upstreams``: slot -> what it tracks) taken out and split in
    turn. A stage that has pulled nothing yet may leave it out: the slots before stand where they are."""
    slots: dict[str, dict[str, Any]] = {}
    for slot, state in nested.items():
        own = dict(state)
        upstream = upstreams.get(slot)
        if upstream is not None:
            before = own.pop(UPSTREAM, None)
            if before is None:
                before = upstream.state_from_snapshot(upstream.state_snapshot())
            slots.update(split_slots(before, upstreams))
        slots[slot] = own
    return slots


def stateful(slot: str, component: Any) -> Any:
    if is_map_style(component):
        return component
    names = ("state_dict", "load_state_dict")
    missing = [name for name in names if not callable(getattr(component, name, None))]
    if missing:
        raise ResumeError(
            f"{slot}: a {type(component).__name__} has no {' or '.join(f'{m}()' for m in missing)}, so this "
            "loader cannot be saved or resumed; implement the protocol in loaderfactory.components.state"
        )
    return component


def saved_slots(slots: Any) -> Mapping[str, Mapping[str, Any]]:
    """The ``slots`` of a Loader state, each checked to be ``{"kind": str | None, "state": dict}``."""
    if not isinstance(slots, Mapping):
        raise StateFieldError("Loader", "slots", f"must be a dict of slot -> {{kind, state}}, got {slots!r}")
    for slot, entry in slots.items():
        if not isinstance(entry, Mapping):
            raise StateFieldError("Loader", f"slots.{slot}", f"must be a dict {{kind, state}}, got {entry!r}")
        for key in ("kind", "state"):
            if key not in entry:
                raise StateFieldError("Loader", f"slots.{slot}.{key}", "is missing")
        if not isinstance(entry["kind"], str | None):
            raise StateFieldError(
                "Loader", f"slots.{slot}.kind", f"must be the slot's kind or null, got {entry['kind']!r}"
            )
        if not isinstance(entry["state"], Mapping):
            raise StateFieldError(
                "Loader",
                f"slots.{slot}.state",
                f"must be a dict (the component's state), got {entry['state']!r}",
            )
    return slots


def load_slot(slot: str, component: Any, state: Mapping[str, Any]) -> None:
    """``component.load_state_dict(state)``, its refusal reported at the slot's path in the state."""
    try:
        component.load_state_dict(state)
    except StateFieldError as err:
        raise StateFieldError(err.owner, f"slots.{slot}.state.{err.field}", err.problem) from err
    except ResumeError as err:
        raise ResumeError(f"slots.{slot}.state: {err}") from err


class Difference(NamedTuple):
    """Where two JSON configs differ: the path (keys and list indices) and both values."""

    path: tuple[str, ...]
    saved: Any
    now: Any

    @property
    def where(self) -> str:
        return ".".join(self.path) or "<root>"

    def __str__(self) -> str:
        return f"{self.where}: saved {self.saved!r}, now {self.now!r}"


class _Absent:
    """A key one of two configs lacks (a field added to a spec after a state was saved, say)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def differences(saved: Any, current: Any, path: tuple[str, ...] = ()) -> list[Difference]:
    """Where two JSON configs differ, down to the dict keys and list items of equal-length lists; a
    key only one side has shows :data:`ABSENT` on the other."""
    if isinstance(saved, dict) and isinstance(current, dict):
        found = []
        for key in sorted(set(saved) | set(current), key=str):
            pair = saved.get(key, ABSENT), current.get(key, ABSENT)
            found.extend(differences(*pair, (*path, str(key))))
        return found
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        return [
            d
            for n, pair in enumerate(zip(saved, current, strict=True))
            for d in differences(*pair, (*path, str(n)))
        ]
    if saved != current:
        return [Difference(path, saved, current)]
    return []


def mixture_changes(saved: Any, current: Any, spec: Any) -> list[Difference]:
    """The differences that only change how a mixture mixes its sources, when ``resume.mixture_changes``
    lets a state resume across them (none otherwise)."""
    if not getattr(getattr(spec, "resume", None), "mixture_changes", False):
        return []
    return [d for d in differences(saved, current) if _slot_says(spec, d, "is_mix_change", d.path[1:])]


def global_batch_splits(saved: Any, current: Any, dataset: Any) -> list[Difference]:
    """``loader.batch_size`` changed with the world size while the dataset mixes fixed global batches
    (a mixture's ``global_batch``): the same global steps, split between other ranks (the loader
    checks its batch_size × world size is the global batch)."""
    if getattr(dataset, "global_batch", None) is None:
        return []
    return [d for d in differences(saved, current) if d.path == ("loader", "batch_size")]


def warn_mixture_changed(changes: Sequence[Difference]) -> None:
    """A :class:`ResumeWarning` naming each change of a mixture a state resumed across."""
    if changes:
        warnings.warn(
            f"resumed a mixture that changed since the state was saved: {'; '.join(map(str, changes))}. "
            "The rest of the epoch follows the new mixture from the saved position: draws before and "
            "after it may overlap or miss some samples this epoch",
            ResumeWarning,
            stacklevel=3,
        )


def _slot_says(spec: Any, difference: Difference, hook: str, *args: Any) -> bool:
    """What the hook of the spec of the slot ``difference`` lies in says of it."""
    path = difference.path
    if len(path) < 2 or path[0] not in getattr(type(spec), "model_fields", {}):
        return False
    ask = getattr(getattr(spec, path[0], None), hook, None)
    return callable(ask) and bool(ask(*args))


def moved_data(
    saved: Any, current: Any, spec: Any, strict: bool, accepted: Sequence[Difference] = ()
) -> list[Difference]:
    """The differences between a saved config and the loader's that only move the data; raises
    ``ResumeError`` listing the others (all of them with ``strict``).

    A difference moves the data when both values are strings and the slot's spec calls it a location
    (``Spec.is_location``: its ``location_fields``, a ``_target_``'s path-like arguments), or it lies
    under one of ``spec.resume.locations``. The dataset's length is checked when its slot loads.
    ``accepted`` differences (:func:`mixture_changes`) are neither refused nor returned.
    A field the saved config lacks (a state saved before the field existed) is no difference while
    the field keeps its default."""
    found = [
        d for d in differences(saved, current) if not _new_field_at_default(d, spec) and d not in accepted
    ]
    declared = tuple(getattr(getattr(spec, "resume", None), "locations", ()))
    moved = [d for d in found if _moves_data(d, spec, declared)]
    refused = found if strict else [d for d in found if d not in moved]
    if not refused:
        return moved
    shown = "; ".join(map(str, refused[:8])) + ("; ..." if len(refused) > 8 else "")
    hint = "build the loader from the saved config"
    if strict and moved:
        hint += " (resume.strict is on: set resume.strict=false to resume from the same data, moved)"
    elif any(_slot_says(spec, d, "is_mix_change", d.path[1:]) for d in refused):
        hint += "; to go on with the mixture as it is now, set resume.mixture_changes=true"
    elif any(isinstance(d.now, str) and d.path[-1:] not in (("kind",), ("target",)) for d in refused):
        hint += "; if a path there only says where the same data lives, list it in resume.locations"
    raise ResumeError(f"the state was saved from another config ({shown}); {hint}")


def _new_field_at_default(difference: Difference, spec: Any) -> bool:
    """True when the saved config lacks a spec field that now holds its default value."""
    if difference.saved is not ABSENT or not difference.path:
        return False
    owner: Any = spec
    for name in difference.path[:-1]:
        owner = getattr(owner, name, None)
    field = getattr(type(owner), "model_fields", {}).get(difference.path[-1])
    if field is None or field.is_required():
        return False
    from pydantic import TypeAdapter  # here: a runtime module loads no config machinery up front

    default = field.get_default(call_default_factory=True, validated_data={})
    dumped = TypeAdapter(Any).dump_python(default, mode="json")
    return bool(dumped == difference.now)


def _moves_data(difference: Difference, spec: Any, declared: tuple[str, ...]) -> bool:
    path, saved, now = difference
    if not (isinstance(saved, str) and isinstance(now, str)) or len(path) < 2:
        return False
    if any(difference.where == d or difference.where.startswith(f"{d}.") for d in declared):
        return True
    return _slot_says(spec, difference, "is_location", path[1:], saved, now)


def warn_moved(moved: Sequence[Difference]) -> None:
    """A :class:`ResumeWarning` naming each location a loaded state was saved with, and the new one."""
    if moved:
        warnings.warn(
            "resumed with the data in another place, taken to be the same data (its kind and length "
            f"match): {'; '.join(map(str, moved))}. Set resume.strict=true to refuse a moved dataset",
            ResumeWarning,
            stacklevel=3,
        )
