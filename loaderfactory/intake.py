"""The way in: what users hand us (a YAML path, dict, OmegaConf node or spec) becomes a validated spec.

OmegaConf nodes and YAML files become plain data here, once (through :mod:`loaderfactory.plain`);
the config layer below (:mod:`loaderfactory.config.validation`) sees only plain data. A node taken
from a larger config (``cfg.data``) has its problems named from that config's root
(``data.loader.batch_size``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.config.validation import require_dataset_slot, validate_plain
from loaderfactory.errors import ConfigError, ConfigProblem


@dataclass(frozen=True)
class Intake:
    """A validated spec and where its config sits in the user's config (``""`` at the root)."""

    spec: LoaderSpec
    root: str


def validate(config: Any, *, require_dataset: bool = True) -> LoaderSpec:
    """Check a config without building anything; return its spec or raise :class:`ConfigError`.

    Args:
        config: a YAML path, dict, OmegaConf node or :class:`LoaderSpec`. Problems in a node taken
            from a larger config (``cfg.data``) are reported with paths from that config's root. A
            dict holds what YAML can write; numpy scalars (``np.int64(4)``) count as their Python
            value, and anything else (a set, a tensor, a function) is a problem at its path.
        require_dataset: refuse a config without a ``dataset`` slot (``build_loader`` turns this
            off when a dataset object is passed in).
    """
    return take_in(config, require_dataset=require_dataset).spec


def take_in(config: Any, *, require_dataset: bool = True) -> Intake:
    """:func:`validate`, keeping the config's root for the errors that building may find later."""
    if isinstance(config, LoaderSpec):
        if require_dataset:
            require_dataset_slot(config)
        return Intake(config, "")
    if type(config) is dict:  # nothing for OmegaConf to do: its import (~0.5 s) is spared
        with contextlib.suppress(_NeedsOmegaConf):
            return Intake(validate_plain(_plain_copy(config), require_dataset, ""), "")
    from loaderfactory.plain import explain_interpolations, node_path, to_plain  # imports OmegaConf

    root = node_path(config)
    try:
        return Intake(validate_plain(to_plain(config), require_dataset, root), root)
    except ConfigError as err:
        raise at_root(root, explain_interpolations(config, err)) from None


_SCALARS = (str, int, float, bool, type(None))


class _NeedsOmegaConf(Exception):
    """A value that only OmegaConf turns into plain data."""


def _plain_copy(value: Any) -> Any:
    """A copy of a dict of plain YAML values (tuples as lists, as OmegaConf gives them); raises
    :class:`_NeedsOmegaConf` for an interpolation or ``???`` in a string, a numpy scalar, any other type."""
    kind = type(value)
    if kind is dict:
        if any(type(key) is not str for key in value):
            raise _NeedsOmegaConf
        return {key: _plain_copy(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_plain_copy(item) for item in value]
    if kind not in _SCALARS or (kind is str and ("${" in value or value == "???")):
        raise _NeedsOmegaConf
    return value


def at_root(root: str, err: ConfigError) -> ConfigError:
    """``err`` with its paths prefixed by ``root`` (itself when ``root`` is empty)."""
    if not root:
        return err
    return ConfigError([ConfigProblem(f"{root}.{p.path}".rstrip("."), p.message) for p in err.problems])
