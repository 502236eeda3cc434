"""The data module's stage configs → validated specs, every problem of every stage at once.

Problems are named from the app's root config (``data.test.loader.batch_size``): a stage config
that arrives as an OmegaConf node (``hydra.utils.instantiate(cfg.data)`` with ``_recursive_:
false``) carries its own path; otherwise the module's ``config_path`` goes in front.
"""

from __future__ import annotations

import difflib
import os
import reprlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.config.validation import require_dataset_slot, validate_plain
from loaderfactory.errors import ConfigError, ConfigProblem
from loaderfactory.intake import at_root

Stage = Literal["train", "val", "test", "predict"]

STAGES: tuple[Stage, ...] = ("train", "val", "test", "predict")

_FILL_SLOTS = ("queue", "loader")
"""Where a shared argument goes: the first of these slots that is set and has the field (a queue batches)."""

_RECURSIVE_HINT = (
    "Hydra instantiated this nested _target_ before the data module could validate it; add "
    "`_recursive_: false` beside `_target_: loaderfactory.lightning.LoaderDataModule` in the data config"
)


@dataclass(frozen=True)
class StageConfig:
    """One stage's config as given, as plain data (or the spec it was), and its path in the app's config."""

    given: dict[str, Any] | LoaderSpec
    root: str
    has_dataset: bool


def take_in_stages(
    configs: Mapping[Stage, Any], with_dataset: Mapping[Stage, bool], config_path: str | None
) -> tuple[dict[Stage, StageConfig], str]:
    """Each set stage's config as plain data with its root, and the module's own root (``data``)."""
    stages: dict[Stage, StageConfig] = {}
    problems: list[ConfigProblem] = []
    roots = {stage: _node_path(config) for stage, config in configs.items() if config is not None}
    module_root = _module_root(roots, config_path)
    for stage, config in configs.items():
        if config is None:
            continue
        root = roots[stage] or _join(module_root, stage)
        try:
            stages[stage] = StageConfig(_plain(config), root, with_dataset[stage])
        except ConfigError as err:
            problems += at_root(root, err).problems
    if problems:
        raise ConfigError(problems)
    return stages, module_root


def resolve(
    stages: Mapping[Stage, StageConfig],
    shared: Mapping[str, Any],
    module_root: str,
    flags: Mapping[str, Any] | None = None,
) -> dict[Stage, LoaderSpec]:
    """The spec of every stage with the shared arguments filled in; one ConfigError for all problems,
    those of the module's on/off arguments (``flags``, each a bool) among them."""
    problems = _check_shared(shared, module_root) + _check_flags(flags or {}, module_root)
    broken = {problem.path.rpartition(".")[2] for problem in problems}
    shared = {name: value for name, value in shared.items() if name not in broken}  # reported once, above
    specs: dict[Stage, LoaderSpec] = {}
    for stage, config in stages.items():
        try:
            specs[stage] = _spec(config, shared)
        except ConfigError as err:
            problems += at_root(config.root, err).problems
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    return specs


def own_settings(stages: Mapping[Stage, StageConfig], name: str) -> list[str]:
    """The paths of the stages' own values of shared argument ``name`` (``data.train.loader.batch_size``)."""
    paths = []
    for config in stages.values():
        spec = _validated(config)
        slot = _fill_slot(spec, name)
        if slot is not None and name in spec.slot(slot).model_fields_set:
            paths.append(f"{config.root}.{slot}.{name}")
    return paths


def unknown_arguments(given: Mapping[str, Any], allowed: list[str], owner: str) -> ConfigError | None:
    """Keyword arguments not in ``allowed``, each at its path in the app's config (``data.batch_sise``)
    with the closest allowed name; ``None`` when there are none."""
    unknown = [name for name in given if name not in allowed]
    if not unknown:
        return None
    roots = {stage: _node_path(given[stage]) for stage in STAGES if given.get(stage) is not None}
    config_path = given.get("config_path")
    root = _module_root(roots, config_path if isinstance(config_path, str) else None)
    problems = []
    for name in unknown:
        guess = difflib.get_close_matches(name, allowed, n=1)
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        got = reprlib.repr(given[name])
        message = f"unknown argument of {owner} (got {got}).{hint} Allowed: {', '.join(allowed)}"
        problems.append(ConfigProblem(_join(root, name), message))
    return ConfigError(problems)


def ignored_shared(stages: Mapping[Stage, StageConfig], shared: Mapping[str, Any], module_root: str) -> str:
    """What the module's shared arguments change in no stage, because the stage sets another value of
    its own (a loader preset's ``batch_size: 32``, say); ``""`` when every one applies."""
    ignored = []
    for stage, config in stages.items():
        spec = _validated(config)
        for name, value in shared.items():
            slot = _fill_slot(spec, name)
            if value is None or slot is None or name not in spec.slot(slot).model_fields_set:
                continue
            own = getattr(spec.slot(slot), name)
            if own != value:
                path = f"{config.root}.{slot}.{name}"
                ignored.append(
                    f"{_join(module_root, name)}={value!r} is not used by stage {stage}: {path} is {own!r}"
                )
    if not ignored:
        return ""
    return f"{'; '.join(ignored)}. Remove the stage's own value to have the module's apply there"


def plain_for_hparams(config: StageConfig) -> Any:
    """A stage's config as ``hparams`` shows it: the plain data given, or the spec's fields."""
    if isinstance(config.given, LoaderSpec):
        return config.given.model_dump(mode="json", exclude_unset=True)
    return config.given


def _spec(config: StageConfig, shared: Mapping[str, Any]) -> LoaderSpec:
    spec = _validated(config)
    fills: dict[str, dict[str, Any]] = {}
    for name, value in shared.items():
        slot = _fill_slot(spec, name)
        if value is not None and slot is not None and name not in spec.slot(slot).model_fields_set:
            fills.setdefault(slot, {})[name] = value
    if not fills:
        return spec
    if isinstance(config.given, LoaderSpec):  # the values passed _check_shared; the slot's fields allow them
        return spec.model_copy(update={s: spec.slot(s).model_copy(update=f) for s, f in fills.items()})
    data = dict(config.given)
    for slot, values in fills.items():
        written = data.get(slot) or {"kind": spec.slot(slot).kind}  # a slot left to its default: its kind
        data[slot] = {**written, **values}
    return validate_plain(data, not config.has_dataset, config.root)


def _validated(config: StageConfig) -> LoaderSpec:
    if isinstance(config.given, LoaderSpec):
        if not config.has_dataset:
            require_dataset_slot(config.given)
        return config.given
    return validate_plain(config.given, not config.has_dataset, config.root)


def _fill_slot(spec: LoaderSpec, name: str) -> str | None:
    for slot in _FILL_SLOTS:
        slot_spec = spec.slot(slot)
        if slot_spec is not None and name in type(slot_spec).model_fields:
            return slot
    return None


def _check_shared(shared: Mapping[str, Any], module_root: str) -> list[ConfigProblem]:
    """The shared arguments checked as the ``torch`` loader's fields, reported at the module's arguments."""
    given = {name: value for name, value in shared.items() if value is not None}
    try:
        validate_plain({"loader": {"kind": "torch", **given}}, require_dataset=False)
    except ConfigError as err:
        return [
            ConfigProblem(_join(module_root, p.path.removeprefix("loader.")), p.message) for p in err.problems
        ]
    return []


def _check_flags(flags: Mapping[str, Any], module_root: str) -> list[ConfigProblem]:
    return [
        ConfigProblem(_join(module_root, name), f"must be true or false, got {reprlib.repr(value)}")
        for name, value in flags.items()
        if not isinstance(value, bool)
    ]


def _plain(config: Any) -> dict[str, Any] | LoaderSpec:
    """Plain data of a stage config; an object where a config belongs means Hydra built it already."""
    if isinstance(config, LoaderSpec):
        return config
    from loaderfactory.plain import to_plain  # OmegaConf only where a config needs it

    plain = to_plain(config)
    objects = list(_objects(plain, ""))
    if objects:
        raise ConfigError(
            [
                ConfigProblem(path, f"a {type(obj).__name__} object, not a config: {_RECURSIVE_HINT}")
                for path, obj in objects
            ]
        )
    if not isinstance(plain, dict):
        raise ConfigError(
            f"a stage config must be a mapping of slots (dataset, loader, ...) or a YAML path, got "
            f"{type(config).__name__}; pass a dataset built in code as dataset= or <stage>_dataset="
        )
    return plain


_PLAIN = (str, int, float, bool, type(None), bytes, Path, os.PathLike, Enum)


def _objects(value: Any, path: str) -> Any:
    """(path, object) for each value in plain config data that no YAML could have written."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _objects(item, _join(path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _objects(item, _join(path, str(index)))
    elif not isinstance(value, _PLAIN):
        yield path, value


def _node_path(config: Any) -> str:
    if isinstance(config, LoaderSpec | dict | str | os.PathLike):
        return ""
    from loaderfactory.plain import node_path

    return node_path(config)


def _module_root(roots: Mapping[Stage, str], config_path: str | None) -> str:
    """Where the module's arguments sit in the app's config: ``config_path``, else the stage nodes'
    parent, else the key Hydra instantiates; ``""`` when none is known."""
    if config_path is not None:
        return config_path
    return _common_parent(roots) or _hydra_target_key() or ""


def _common_parent(roots: Mapping[Stage, str]) -> str:
    """``data`` when the stage configs are nodes ``data.train``, ``data.val``; else ``""``."""
    parents = {root.rpartition(".")[0] for root in roots.values() if root}
    return parents.pop() if len(parents) == 1 else ""


def _hydra_target_key() -> str | None:
    """The key of the node Hydra's ``instantiate`` is building us from (``data``), when it is.

    Hydra 1.3 detaches the argument nodes from their parent before it calls the target
    (``_call_target`` in ``hydra/_internal/instantiate/_instantiate2.py``), so ``cfg.data.train``
    arrives without its path; that function's frame still holds the key. This is the one place that
    reads Hydra's internals; when they change, paths start at the stage (or at ``config_path``).
    """
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_call_target" and "hydra" in code.co_filename:
            key = frame.f_locals.get("full_key")
            return key if isinstance(key, str) else None
        frame = frame.f_back  # type: ignore[assignment]  # the outermost frame's f_back is None
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
