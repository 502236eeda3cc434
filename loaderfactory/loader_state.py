"""What a :class:`~loaderfactory.loader.Loader` saves and restores: per-slot state plans, the cheap
snapshots stages that read ahead take after every item, and the checks of a saved state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from loaderfactory.components.data.sources import is_map_style
from loaderfactory.components.state import UPSTREAM, StateFieldError
from loaderfactory.errors import ResumeError

StatePlan = tuple[str, Any, str, "Callable[[], Any] | None"]
"""``(slot, component, how, function)``; see :func:`state_plan`."""


class Snapshot(NamedTuple):
    """The slots' positions as a stage read an item: tokens and states, built into a state on demand
    (a named tuple: one is made per item, so it must be cheap to make)."""

    parts: tuple[tuple[int, Any], ...]
    upstream: Any


def state_plan(slot: str, component: Any) -> StatePlan:
    """``(slot, component, how, function)``: how the slot's state is taken, chosen once.

    ``length``: a dataset without state, recorded by its length; ``token``: a slot with
    ``state_snapshot()``/``state_from_snapshot()``; ``state``: its ``state_dict()``;
    ``unsaveable``: building its state raises ``ResumeError`` naming ``slot``.
    """
    if is_map_style(component) and not hasattr(component, "state_dict"):
        return slot, component, "length", None
    snapshot = getattr(component, "state_snapshot", None)
    if callable(snapshot) and callable(getattr(component, "state_from_snapshot", None)):
        return slot, component, "token", snapshot
    state_dict = getattr(component, "state_dict", None)
    loads = callable(getattr(component, "load_state_dict", None))
    if callable(state_dict) and (loads or is_map_style(component)):
        return slot, component, "state", state_dict
    return slot, component, "unsaveable", None


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


def differences(saved: Any, current: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON configs differ, with both values."""
    if isinstance(saved, dict) and isinstance(current, dict):
        found = []
        for key in sorted(set(saved) | set(current), key=str):
            where = f"{path}.{key}" if path else str(key)
            found.extend(differences(saved.get(key), current.get(key), where))
        return found
    if saved != current:
        return [f"{path or '<root>'}: saved {saved!r}, now {current!r}"]
    return []


def take_snapshot(plans: list[StatePlan], index: int) -> Snapshot:
    """What a state of the slots up to ``index`` needs, taken cheaply: the stages that read ahead
    call it after every item. A slot with ``state_snapshot()`` gives a small immutable token (its
    state is built only when asked for), a dataset without state gives nothing, any other slot its
    ``state_dict()``; a stage that reads ahead passes on its own upstream snapshot."""
    parts: list[tuple[int, Any]] = []
    while index >= 0:
        _, _, how, take = plans[index]
        if take is not None:  # a token or a state
            part = take()
            if how == "state":
                part = dict(part)
                upstream = part.pop(UPSTREAM, None)
                if upstream is not None:
                    parts.append((index, part))
                    return Snapshot(tuple(parts), upstream)
            parts.append((index, part))
        else:
            parts.append((index, None))
        index -= 1
    return Snapshot(tuple(parts), None)


def materialize(plans: list[StatePlan], snapshot: Any) -> dict[str, Any]:
    """The per-slot states a snapshot (or an already built state) stands for; the slot nearest
    the consumer that cannot be saved raises first."""
    if not isinstance(snapshot, Snapshot):
        return dict(snapshot)
    mine: list[tuple[str, dict[str, Any]]] = []
    for index, part in snapshot.parts:
        slot, component, how, _ = plans[index]
        if how == "token":
            mine.append((slot, dict(component.state_from_snapshot(part))))
        elif how == "state":
            mine.append((slot, part))
        elif how == "length":
            mine.append((slot, {"length": len(component)}))
        else:
            stateful(slot, component)  # raises ResumeError naming the slot
    upstream = {} if snapshot.upstream is None else materialize(plans, snapshot.upstream)
    return {**upstream, **dict(reversed(mine))}
