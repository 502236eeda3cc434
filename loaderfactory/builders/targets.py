"""Build ``_target_`` nodes with ``hydra.utils.instantiate``, with errors at the node's config path."""

from __future__ import annotations

import inspect
from typing import Any

from loaderfactory.config.specs.target import HYDRA_TARGET_KEYS, TargetSpec, resolve_target
from loaderfactory.errors import ConfigError, ConfigProblem


def instantiate_target(spec: TargetSpec, path: str, **given: Any) -> Any:
    """``hydra.utils.instantiate(spec.config)``: nested ``_target_``, ``_args_``, ``_partial_``...

    ``given`` objects (a dataset) reach the target as they are: passed as ``instantiate``'s own
    keyword arguments they would be merged into the config, so a list dataset would arrive as an
    OmegaConf copy (and take seconds per 10,000 items to convert).

    Raises:
        ConfigError: at ``path``, with the target's own error (a ``TypeError`` for a wrong argument).
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        if not given:
            return instantiate(spec.config)
        build = instantiate({**spec.config, "_partial_": True})
        try:
            return build(**given)
        except Exception as err:  # what instantiate wraps when it makes the call itself
            raise InstantiationException(str(err)) from err
    except InstantiationException as err:
        cause = err.__cause__ if err.__cause__ is not None else err
        arguments = [k for k in spec.kwargs if k not in HYDRA_TARGET_KEYS] + list(given)
        message = f"{spec.target}({', '.join(arguments)}): {cause}"
        if isinstance(cause, TypeError) and "_partial_" not in spec.kwargs and _is_function(spec.target):
            message += " (a function to be called later, such as a collate_fn, needs _partial_: true)"
        raise ConfigError(ConfigProblem(path, message)) from cause


def instantiate_with_dataset(spec: TargetSpec, path: str, dataset: Any) -> Any:
    """Like :func:`instantiate_target`, passing ``dataset`` as the target's ``data_source`` or
    ``dataset`` argument when it has one and the config leaves it out (samplers take it)."""
    try:
        parameters = inspect.signature(resolve_target(spec.target)).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]  # builtins without a signature take what is given
    for name in ("data_source", "dataset"):
        if name in parameters and name not in spec.kwargs:
            return instantiate_target(spec, path, **{name: dataset})
    return instantiate_target(spec, path)


def _is_function(target: str) -> bool:
    try:
        return inspect.isfunction(resolve_target(target)) or inspect.isbuiltin(resolve_target(target))
    except ValueError:
        return False
