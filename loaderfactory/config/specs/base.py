"""The base ``Spec`` and the small field types every component spec shares.

One vocabulary across kinds: ``batch_size``, ``buffer_size``, ``timeout``, ``repeats``, ``epoch_size``,
``num_workers``/``worker_type``, ``ram_budget``, ``seed``. The seeds' names are accepted as aliases
(``bs``, ``epoch_len``, ``buffer_timeout``, ...), never both at once.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from loaderfactory.sizes import SIZE_PATTERN
from loaderfactory.sizes import parse_size as parse_size  # re-exported: its home before sizes.py

Count = Annotated[int, Field(ge=1, strict=True)]
"""A whole number ≥ 1 (errors read "must be ≥ 1, got 0"); ``true`` is not a count."""
BatchSize = Count
BufferSize = Count
Repeats = Count
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
MAX_WAIT_S = 10**6
"""Longest finite wait (11.6 days); beyond it use ``null`` (wait forever), not a huge number."""


def _finite_seconds(value: Any) -> Any:
    """``timeout: .inf`` means "forever", which is written ``null``; say so instead of "finite"."""
    if isinstance(value, float) and not math.isfinite(value):
        message = f"must be a finite number of seconds, got {value!r}; null waits forever"
        raise PydanticCustomError(RULE, message)
    return value


Timeout = (
    Annotated[float, Field(gt=0, le=MAX_WAIT_S, allow_inf_nan=False), BeforeValidator(_finite_seconds)] | None
)
"""Seconds a stage may wait for the stage before it; ``None`` waits forever."""
Milliseconds = Annotated[float, Field(ge=0, le=MAX_WAIT_S * 1000, allow_inf_nan=False)]
"""A finite, non-negative duration in milliseconds."""
MAX_WORKERS = 1024
"""Most background workers one stage may start. A fixed bound, not ``os.cpu_count()``: a config
validated on a laptop must stay valid on the cluster node it is meant for."""
NumWorkers = Annotated[int, Field(ge=0, le=MAX_WORKERS)]
"""Threads or processes a stage starts; errors read "must be ≤ 1024, got 1000000000"."""
Finite = Annotated[float, Field(allow_inf_nan=False)]
"""A float that is neither ``.nan`` nor ``.inf`` (YAML can write both)."""


def alias(*names: str) -> AliasChoices:
    """Accept the field's own name first, then the seeds' names for it."""
    return AliasChoices(*names)


RULE = "config_rule"
"""Error type of problems raised by :func:`broken_rules`; their message is shown as written."""


def broken_rules(title: str, problems: list[tuple[str, str, Any]]) -> ValidationError:
    """One ``ValidationError`` with a problem per ``(field, message, value)``, each at its own field.

    Raise it from a ``model_validator`` so a cross-field rule points at the field to change
    (``loader.prefetch_factor: needs num_workers >= 1``) instead of at the whole slot.
    """
    details: list[InitErrorDetails] = [
        {"type": PydanticCustomError(RULE, message), "loc": (field,), "input": value}
        for field, message, value in problems
    ]
    return ValidationError.from_exception_data(title, details)


def refuse_unless(enabled: bool, title: str, options: dict[str, Any], reason: str) -> None:
    """Refuse each option in ``options`` that is set (not ``None``/``False``) when ``enabled`` is false.

    ``reason`` says what the options need and how to provide it, e.g. ``"needs worker processes,
    but num_workers is 0; set num_workers >= 1"``; each problem ends with ``or drop <option>``.
    """
    if enabled:
        return
    problems = [
        (name, f"{reason} or drop {name}", value)
        for name, value in options.items()
        if value is not None and value is not False
    ]
    if problems:
        raise broken_rules(title, problems)


class Spec(BaseModel):
    """Base of every spec: strict (unknown keys are errors), frozen, and alias-aware."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        use_attribute_docstrings=True,
        strict=True,  # `num_workers: true` or `shuffle: "yes"` are mistakes, not 1 and True
    )

    speed_only: ClassVar[frozenset[str]] = frozenset()
    """Fields that change speed or resources but never the batch sequence: a state saved under one
    value resumes under another (``Loader.load_state_dict`` compares every other field)."""

    rank_only: ClassVar[frozenset[str]] = frozenset()
    """Fields that place this process among data-parallel ranks: a saved state is the same on every
    rank and at every world size, so they may differ on resume too."""

    location_fields: ClassVar[frozenset[str]] = frozenset()
    """Fields that say where the data lives (a folder, a URL), not what it is: on resume a state saved
    with another value is loaded with a warning naming both, unless ``resume.strict`` (the dataset's
    length and every field that shapes the order must still match)."""

    value_aliases: ClassVar[dict[str, str]] = {}
    """Seeds' names whose value a kind's own ``before`` validator translates, each to the field it
    sets (``thread_pool: true`` → ``worker_type: thread``); given with that field, refused like ``bs``
    with ``batch_size``."""

    def is_location(self, path: tuple[str, ...], saved: str, now: str) -> bool:
        """Whether a difference at ``path`` (field names and list indices inside this spec) between the
        strings ``saved`` and ``now`` only says where the data lives: a :attr:`location_fields` field,
        or a location inside a nested spec (a list of specs too)."""
        if not path:
            return False
        if path[0] in self.location_fields:
            return True
        inner = getattr(self, path[0], None) if path[0] in type(self).model_fields else None
        rest = path[1:]
        if isinstance(inner, list) and rest and rest[0].isdigit() and int(rest[0]) < len(inner):
            inner, rest = inner[int(rest[0])], rest[1:]
        return isinstance(inner, Spec) and inner.is_location(rest, saved, now)

    def is_mix_change(self, path: tuple[str, ...]) -> bool:
        """Whether a difference at ``path`` only changes how sources are mixed (a mixture's weights or
        sources), which ``resume.mixture_changes`` lets a state resume across. No field, by default."""
        return False

    @model_validator(mode="wrap")
    @classmethod
    def _one_name_per_field(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """Refuse ``batch_size`` and its alias ``bs`` given together: which one wins is a guess.

        The slot's other problems are still reported: it is validated without the second name.
        """
        if not isinstance(data, dict):
            return handler(data)
        twice = [(name, field) for name, field in cls.value_aliases.items() if name in data and field in data]
        for field in cls.model_fields.values():
            choices = field.validation_alias
            if isinstance(choices, AliasChoices):
                given = [c for c in choices.choices if isinstance(c, str) and c in data]
                twice += [(other, given[0]) for other in given[1:]]
        if not twice:
            return handler(data)
        problems = [
            (name, f"names the same field as {first!r}; give only one of them", data[name])
            for name, first in twice
        ]
        clash = broken_rules(cls.__name__, problems)
        details: list[InitErrorDetails] = _details(clash)
        try:
            handler({k: v for k, v in data.items() if k not in {name for name, _ in twice}})
        except ValidationError as err:
            details += _details(err)
        raise ValidationError.from_exception_data(cls.__name__, details)


def _details(error: ValidationError) -> list[InitErrorDetails]:
    """``error``'s problems as details a new ``ValidationError`` can carry, types and context kept."""
    return [
        {
            # The message is final; the context goes along for those who read it (bounds, say).
            "type": PydanticCustomError(e["type"], e["msg"], e.get("ctx")),
            "loc": e["loc"],
            "input": e.get("input"),
        }
        for e in error.errors()
    ]


class WorkersSpec(Spec):
    """Background workers: how many, and whether they are threads or processes."""

    num_workers: NumWorkers = 0
    worker_type: Literal["thread", "process"] = "process"


def _ram_budget(value: Any) -> Any:
    if isinstance(value, str):
        size = parse_size(value)
        if size < 1:
            raise ValueError(f"a size budget must be at least 1 byte, got {value!r}")
        return int(size)  # a plain int: strict mode takes no int subclass for ``float | int``
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a fraction in (0, 1] or a size string like '2GiB', got {value!r}")
    if not 0 < value <= 1:
        raise ValueError(
            f"a number is a fraction of available memory and must be in (0, 1], got {value!r}; "
            "for an absolute budget write a size string like '2GiB'"
        )
    return float(value)


_RAM_BUDGET_SCHEMA = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        {"type": "string", "pattern": SIZE_PATTERN},
    ]
}
RamBudget = Annotated[float | int, BeforeValidator(_ram_budget), WithJsonSchema(_RAM_BUDGET_SCHEMA)]
"""A float in (0, 1] is a fraction of available memory; an int is bytes (parsed from ``"2GiB"``)."""
