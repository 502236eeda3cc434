"""Rules across arguments, written once for both layers: pure Python, no torch, pydantic or Hydra.

Each function returns ``(field, message, value)`` for every rule broken. A spec reports them all at
once, each at its config field (:func:`loaderfactory.config.specs.base.broken_rules`); a runtime
constructor raises the first as :class:`~loaderfactory.errors.ArgumentError` (:func:`raise_first`).
"""

from __future__ import annotations

import difflib
from typing import Any

from loaderfactory.errors import ArgumentError

Problem = tuple[str, str, Any]
"""``(field, message, value)``: the argument (spec field) to change, what is wrong, what was given."""


def raise_first(problems: list[Problem]) -> None:
    """Raise the first problem as an :class:`ArgumentError` naming its argument; nothing when none."""
    if problems:
        field, message, _ = problems[0]
        raise ArgumentError(field, f"{field}: {message}")


def missing_keys_problems(path: str, wanted: list[str], known: list[str], source: str) -> list[Problem]:
    """Each key of ``wanted`` (at config ``path``) that the items, whose keys ``source`` gives, lack."""
    missing = [key for key in wanted if key not in known]
    if not missing:
        return []
    hints = [difflib.get_close_matches(key, known, n=1) for key in missing]
    guess = "".join(
        f" Did you mean {hint[0]!r} for {key!r}?" for key, hint in zip(missing, hints, strict=True) if hint
    )
    message = f"{missing} are not keys of the items; {source} gives {known}.{guess}"
    return [(path, message, missing)]
