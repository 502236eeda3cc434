"""Plain config data → validated :class:`~loaderfactory.config.specs.pipeline.LoaderSpec`, every
problem at once. YAML files and OmegaConf nodes become plain data before, in :mod:`loaderfactory.intake`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from loaderfactory.config import registry
from loaderfactory.config.specs.base import RULE
from loaderfactory.config.specs.pipeline import HYDRA_KEYS, LoaderSpec
from loaderfactory.config.specs.refs import spec_class_for
from loaderfactory.errors import ConfigError, ConfigProblem


def require_dataset_slot(spec: LoaderSpec) -> None:
    """Raise :class:`ConfigError` when ``spec`` has no ``dataset`` slot."""
    if spec.dataset is None:
        raise ConfigError(_missing_dataset())


def validate_plain(data: Any, require_dataset: bool = True, prefix: str = "") -> LoaderSpec:
    """The spec of plain config data (dicts, lists, scalars), or :class:`ConfigError` listing every
    problem; ``prefix`` is where the config sits in the user's (for the errors of ``_target_`` nodes)."""
    if not isinstance(data, dict):
        raise ConfigError(f"a loader config must be a mapping of slots, got {type(data).__name__}")
    data = {k: v for k, v in data.items() if k not in HYDRA_KEYS}
    problems = [_missing_dataset()] if require_dataset and data.get("dataset") is None else []
    try:
        spec = LoaderSpec.model_validate(data, context={"root": prefix})
    except ValidationError as err:
        problems += _tidy([_explain(e, data) for e in err.errors()])
    if problems:
        raise ConfigError(problems)
    return spec


def _missing_dataset() -> ConfigProblem:
    kinds = ", ".join(k for k in registry.available("dataset") if not k.startswith("_"))
    return ConfigProblem(
        "dataset", f"missing; choose a kind ({kinds}), give a _target_, or pass dataset= to build_loader"
    )


_TYPE_ERRORS = {
    "bool_type",
    "bool_parsing",
    "int_type",
    "int_parsing",
    "float_type",
    "float_parsing",
    "string_type",
    "list_type",
    "dict_type",
    "model_type",
    "model_attributes_type",
    "none_required",
    "is_instance_of",
}
_BRANCH_TAG = re.compile(r"^(\w[\w-]*\[.*\]|bool|int|float|str|none|constrained-(int|float|str))$")
"""Names pydantic gives the branches of a union in an error's location (``list[...]``, ``int``)."""


@dataclass(frozen=True)
class _Found:
    problem: ConfigProblem
    type_mismatch: bool


def _tidy(found: list[_Found]) -> list[ConfigProblem]:
    """One problem per mistake: a value given as ``int | bool`` fails both branches, but the user
    made one mistake. Keep the branch whose type matched (or merge), drop the others."""
    by_path: dict[str, list[_Found]] = {}
    for item in found:
        by_path.setdefault(item.problem.path, []).append(item)
    problems = []
    for path, items in by_path.items():
        nested = any(other.startswith(f"{path}.") for other in by_path)
        if all(i.type_mismatch for i in items) and nested:
            continue  # a branch of the other type failed too; the nested problem is the real one
        relevant = [i for i in items if not i.type_mismatch] or items
        messages = list(dict.fromkeys(i.problem.message for i in relevant))
        problems.append(ConfigProblem(path, "; or ".join(messages)))
    return problems


def _explain(error: ErrorDetails, data: dict[str, Any]) -> _Found:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and _BRANCH_TAG.match(part)))
    problem = _problem(error, loc, data)
    return _Found(problem, error["type"] in _TYPE_ERRORS or problem.message.startswith("must be a mapping"))


_BOUNDS = {
    "greater_than_equal": ("≥", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("≤", "le"),
    "less_than": ("<", "lt"),
}

_WANTED = {
    **dict.fromkeys(("int_parsing", "int_type", "int_from_float"), "a whole number"),
    **dict.fromkeys(("float_parsing", "float_type"), "a number"),
    **dict.fromkeys(("bool_parsing", "bool_type"), "true or false"),
    "finite_number": "a finite number",
}
"""What a value must be, by pydantic's error type, for the errors that say only that."""


def _problem(error: ErrorDetails, loc: tuple[int | str, ...], data: dict[str, Any]) -> ConfigProblem:
    path = ".".join(str(part) for part in loc)
    value = error.get("input")
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "extra_forbidden":
        return ConfigProblem(path, _unknown_field(loc, value, data))
    if kind == "missing":
        return ConfigProblem(path, "required, but missing")
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return ConfigProblem(path, f"must be {sign} {ctx[key]}, got {value!r}")
    if kind == "literal_error":
        return ConfigProblem(path, f"must be one of {ctx.get('expected')}, got {value!r}")
    if kind in _WANTED:
        return ConfigProblem(path, f"must be {_WANTED[kind]}, got {value!r}")
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        if isinstance(value, dict) or repr(value) in message:  # the message shows the value already
            return ConfigProblem(path, message)
        return ConfigProblem(path, f"{message} (got {_short(value)})")
    if kind == RULE:
        return ConfigProblem(path, error["msg"])
    return ConfigProblem(path, f"{error['msg'][0].lower()}{error['msg'][1:]}, got {_short(value)}")


def _unknown_field(loc: tuple[int | str, ...], value: Any, data: dict[str, Any]) -> str:
    """The message for an unknown field: its closest allowed name, and all of them."""
    allowed = _allowed_fields(loc[:-1], data)
    hint = ""
    if allowed:
        import difflib

        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = (f" Did you mean {guess[0]!r}?" if guess else "") + f" Allowed: {', '.join(allowed)}"
    return f"unknown field (got {value!r}).{hint}".rstrip(".")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_fields(loc: tuple[int | str, ...], data: Any) -> list[str]:
    """The field names of the model found at ``loc``, following slot kinds through the registry."""
    model: type[BaseModel] | None = LoaderSpec
    node: Any = data
    for part in loc:
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        node = node.get(part) if isinstance(node, dict) else None
        if field is None:
            return []
        if str(part) in registry.SLOTS and isinstance(node, dict):
            try:
                model = spec_class_for(str(part), node)  # type: ignore[arg-type]  # slots are tables
            except (ValidationError, ConfigError):
                return []
            continue
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return []
    return sorted(name for name in model.model_fields if name != "kind")
