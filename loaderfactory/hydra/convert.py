"""Turn what users hand us (a YAML path, dict, OmegaConf node or spec) into plain data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException

from loaderfactory.errors import ConfigError, ConfigProblem


def to_plain(config: Any) -> Any:
    """Plain dicts and lists with interpolations resolved; ``???`` values fail loudly.

    A ``str`` or ``Path`` is read as a YAML file. Dicts may hold OmegaConf interpolations too.
    """
    if isinstance(config, str | os.PathLike):
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            config = OmegaConf.load(path)
        except Exception as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if isinstance(config, dict):
        config = OmegaConf.create(config)
    if isinstance(config, DictConfig | ListConfig):
        try:
            missing = sorted(OmegaConf.missing_keys(config))
            if missing:
                message = "is '???' (mandatory) and was never set; set it in the YAML or on the command line"
                raise ConfigError([ConfigProblem(key, message) for key in missing])
            return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as err:
            raise ConfigError(
                ConfigProblem(
                    _key(err),
                    "is '???' (mandatory) and was never set; set it in the YAML or on the command line",
                )
            ) from err
        except InterpolationResolutionError as err:
            reason = str(err.msg).split("\n")[0]  # OmegaConf appends its own full_key/object_type lines
            raise ConfigError(ConfigProblem(_key(err), f"interpolation failed: {reason}")) from err
        except OmegaConfBaseException as err:
            raise ConfigError(ConfigProblem(_key(err), str(err))) from err
    return config


def node_path(config: Any) -> str:
    """The dotted path of an OmegaConf node inside its root (``"data"`` for ``cfg.data``), else ``""``."""
    if isinstance(config, DictConfig | ListConfig) and config._get_parent() is not None:
        return str(config._get_full_key(None))
    return ""


def _key(err: OmegaConfBaseException) -> str:
    return str(getattr(err, "full_key", "") or "")
