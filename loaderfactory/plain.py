"""What users hand us (a YAML path, dict or OmegaConf node) as plain dicts and lists.

The one arrow "OmegaConf node → plain data": the core's way in (:mod:`loaderfactory.intake`) and the
Lightning edge's stage configs both convert here, so the core never imports the Hydra edge (``hydra/``:
composition and the command). OmegaConf is imported with this module, which the core loads only for
a config that needs it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException

from loaderfactory.errors import ConfigError, ConfigProblem


def to_plain(config: Any) -> Any:
    """Plain dicts and lists with interpolations resolved; ``???`` values fail loudly.

    A ``str`` or ``Path`` is read as a YAML file. Dicts may hold OmegaConf interpolations too, and
    numpy scalars (``np.int64(4)``, ``np.float32(0.5)``, ``np.bool_(True)``) count as the Python
    value they hold, since YAML would write them the same; a value YAML cannot write (a set, a
    tensor, an array, a function) is a :class:`ConfigError` naming its path and type.
    """
    if isinstance(config, str | os.PathLike):
        config = _load_yaml(Path(config))
    if isinstance(config, dict):
        config = _node_of(config)
    if isinstance(config, DictConfig | ListConfig):
        return _resolved(config)
    return config


_MANDATORY = "is '???' (mandatory) and was never set; set it in the YAML or on the command line"


def _load_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        return OmegaConf.load(path)
    except Exception as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err


def _node_of(config: dict[Any, Any]) -> DictConfig:
    """An OmegaConf node of a dict (so its interpolations resolve), after checking its values."""
    problems: list[ConfigProblem] = []
    config = _yaml_values(config, "", problems)
    if problems:
        raise ConfigError(problems)
    try:
        return OmegaConf.create(config)
    except OmegaConfBaseException as err:  # what the walk lets through, e.g. a bad dataclass field
        raise ConfigError(ConfigProblem(_key(err), str(err.msg).split("\n")[0])) from err


def _resolved(config: DictConfig | ListConfig) -> Any:
    """Plain containers of ``config`` with interpolations resolved, every problem at its key."""
    try:
        missing = sorted(OmegaConf.missing_keys(config))
        if missing:
            raise ConfigError([ConfigProblem(key, _MANDATORY) for key in missing])
        return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        raise ConfigError(ConfigProblem(_key(err), _MANDATORY)) from err
    except InterpolationResolutionError as err:
        reason = str(err.msg).split("\n")[0]  # OmegaConf appends its own full_key/object_type lines
        raise ConfigError(ConfigProblem(_key(err), f"interpolation failed: {reason}")) from err
    except OmegaConfBaseException as err:
        raise ConfigError(ConfigProblem(_key(err), str(err))) from err


_NUMBER_WANTED = ("must be a whole number, got ", "must be a number, got ")


def explain_interpolations(config: Any, err: ConfigError) -> ConfigError:
    """``err`` with a hint at each number field given a string by an interpolation.

    ``${oc.env:NUM_WORKERS,0}`` resolves to the string ``'2'``, which a number field refuses as it
    refuses ``num_workers: "2"`` typed in YAML (values are checked strictly). Only an interpolation
    gets the hint: OmegaConf's ``oc.decode`` reads the string as YAML would.
    """
    if not isinstance(config, DictConfig | ListConfig):
        return err
    found = _number_strings(config, "")
    if not found:
        return err
    problems = [
        ConfigProblem(p.path, f"{p.message}; {_decode_hint(p.path, found[p.path])}")
        if p.path in found and p.message.startswith(_NUMBER_WANTED)
        else p
        for p in err.problems
    ]
    return ConfigError(problems)


def _decode_hint(path: str, expression: str) -> str:
    decoded = "${oc.decode:" + expression + "}"
    return (
        f"the interpolation {expression} gives a string; write {decoded} to read it as a number "
        f"""(on the command line, quoted: '{path}="{decoded}"')"""
    )


def _number_strings(node: DictConfig | ListConfig, path: str) -> dict[str, str]:
    """Path → expression of each interpolation in ``node`` whose value is a string holding a number."""
    found: dict[str, str] = {}
    keys: list[Any] = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
    for key in keys:
        child = node._get_node(key)
        if OmegaConf.is_interpolation(node, key):
            try:
                value = node[key]
            except OmegaConfBaseException:  # reported on its own as "interpolation failed"
                continue
            if isinstance(value, str) and _holds_number(value):
                found[_join(path, key)] = str(child._value())  # type: ignore[union-attr]  # a value node
        elif isinstance(child, DictConfig | ListConfig) and not child._is_none():
            found.update(_number_strings(child, _join(path, key)))
    return found


def _holds_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def node_path(config: Any) -> str:
    """The dotted path of an OmegaConf node inside its root (``"data"`` for ``cfg.data``), else ``""``."""
    if isinstance(config, DictConfig | ListConfig) and config._get_parent() is not None:
        return str(config._get_full_key(None))
    return ""


_LEAVES = (str, int, float, bool, bytes, type(None))
"""The scalar types OmegaConf holds (exactly these, no subclasses), besides ``Path`` and ``Enum``."""


def _yaml_values(value: Any, path: str, problems: list[ConfigProblem]) -> Any:
    """``value`` with numpy scalars as Python scalars; a problem for each value YAML cannot write."""
    if isinstance(value, dict):
        return {key: _yaml_values(item, _join(path, key), problems) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_yaml_values(item, _join(path, i), problems) for i, item in enumerate(value)]
    if type(value) in _LEAVES or isinstance(value, Path | Enum | DictConfig | ListConfig):
        return value
    if dataclasses.is_dataclass(value):  # a structured config: OmegaConf checks its fields
        return value
    numpy = sys.modules.get("numpy")  # a numpy value means numpy is imported: no import needed here
    if numpy is not None and isinstance(value, numpy.bool_ | numpy.integer | numpy.floating | numpy.str_):
        return value.item()
    message = f"a {_type_name(value)} is not a config value (YAML cannot write it); {_hint(value)}"
    problems.append(ConfigProblem(path, message))
    return value


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _hint(value: object) -> str:
    if isinstance(value, set | frozenset):
        return "write a list"
    if hasattr(value, "tolist"):  # tensors and arrays
        return "write its numbers as a list (value.tolist())"
    if callable(value):
        return "name it in a _target_ node: {_target_: my.module.function, _partial_: true}"
    return "write numbers, strings, booleans, null, lists and mappings"


def _key(err: OmegaConfBaseException) -> str:
    return str(getattr(err, "full_key", "") or "")
