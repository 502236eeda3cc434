"""Config → validated :class:`~loaderfactory.specs.pipeline.LoaderSpec`, every problem reported at once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from loaderfactory import registry
from loaderfactory.errors import ConfigError, ConfigProblem
from loaderfactory.hydra.convert import to_plain
from loaderfactory.specs.base import RULE
from loaderfactory.specs.pipeline import HYDRA_KEYS, LoaderSpec
from loaderfactory.specs.refs import spec_class_for


def validate(config: Any, *, require_dataset: bool = True) -> LoaderSpec:
    """Check a config without building anything; return its spec or raise :class:`ConfigError`.

    Args:
        config: a YAML path, dict, OmegaConf node or :class:`LoaderSpec`.
        require_dataset: refuse a config without a ``dataset`` slot (``build_loader`` turns this
            off when a dataset object is passed in).
    """
    if isinstance(config, LoaderSpec):
        spec = config
    else:
        data = to_plain(config)
        if not isinstance(data, dict):
            raise ConfigError(f"a loader config must be a mapping of slots, got {type(data).__name__}")
        data = {k: v for k, v in data.items() if k not in HYDRA_KEYS}
        try:
            spec = LoaderSpec.model_validate(data)
        except ValidationError as err:
            raise ConfigError([_explain(e, data) for e in err.errors()]) from None
    if require_dataset and spec.dataset is None:
        kinds = ", ".join(registry.available("dataset"))
        raise ConfigError(
            ConfigProblem("dataset", f"missing; choose a kind ({kinds}) or pass dataset= to build_loader")
        )
    return spec


def _explain(error: ErrorDetails, data: dict[str, Any]) -> ConfigProblem:
    loc = error["loc"]
    path = ".".join(str(part) for part in loc)
    value = error.get("input")
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_fields(loc[:-1], data)
        hint = ""
        if allowed:
            import difflib

            guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = (f" Did you mean {guess[0]!r}?" if guess else "") + f" Allowed: {', '.join(allowed)}"
        return ConfigProblem(path, f"unknown field (got {value!r}).{hint}")
    if kind == "missing":
        return ConfigProblem(path, "required, but missing")
    bounds = {
        "greater_than_equal": ("≥", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("≤", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        sign, key = bounds[kind]
        return ConfigProblem(path, f"must be {sign} {ctx[key]}, got {value!r}")
    if kind == "literal_error":
        return ConfigProblem(path, f"must be one of {ctx.get('expected')}, got {value!r}")
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return ConfigProblem(path, f"must be a whole number, got {value!r}")
    if kind in ("float_parsing", "float_type"):
        return ConfigProblem(path, f"must be a number, got {value!r}")
    if kind in ("bool_parsing", "bool_type"):
        return ConfigProblem(path, f"must be true or false, got {value!r}")
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        if isinstance(value, dict):  # a rule over the whole spec: the value is the spec itself
            return ConfigProblem(path, message)
        return ConfigProblem(path, f"{message} (got {_short(value)})")
    if kind == RULE:
        return ConfigProblem(path, error["msg"])
    return ConfigProblem(path, f"{error['msg'][0].lower()}{error['msg'][1:]}, got {_short(value)}")


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
