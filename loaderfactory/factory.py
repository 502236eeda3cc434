"""Config → running :class:`~loaderfactory.loader.Loader`."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.config import registry
from loaderfactory.config.specs.base import Spec
from loaderfactory.config.specs.kinds import LoaderKindSpec
from loaderfactory.errors import BuildInterrupted, ConfigError, ConfigProblem
from loaderfactory.intake import at_root, take_in
from loaderfactory.loader import Loader


def build_loader(config: Any, *, dataset: Any = None) -> Loader:
    """Validate ``config`` and build its pipeline.

    Args:
        config: a YAML path, dict, OmegaConf node (``cfg.data`` in a Hydra app) or
            :class:`~loaderfactory.config.specs.pipeline.LoaderSpec`.
        dataset: a dataset object built in code; it takes the place of the ``dataset`` slot.

    Raises:
        ConfigError: every problem in the config, before any thread or process starts.
    """
    intake = take_in(config, require_dataset=dataset is None)
    try:
        return _build_pipeline(intake.spec, dataset)
    except ConfigError as err:
        if not intake.root:
            raise
        raise at_root(intake.root, err) from err.__cause__


def build_dataset(config: Any) -> Any:
    """Validate ``config`` and build its ``dataset`` slot alone (what ``run.mode=pack`` writes)."""
    intake = take_in(config, require_dataset=True)
    spec = intake.spec.dataset
    if spec is None:  # take_in refuses this already; here for mypy
        raise ConfigError(ConfigProblem("dataset", "no dataset: set dataset=<preset> or dataset._target_"))
    try:
        context = BuildContext(seed=intake.spec.seed, progress=intake.spec.run.progress)
        return _build("dataset", spec, None, context)
    except ConfigError as err:
        if not intake.root:
            raise
        raise at_root(intake.root, err) from err.__cause__


def _build_pipeline(spec: Any, dataset: Any) -> Loader:
    context = BuildContext(seed=spec.seed, progress=spec.run.progress)
    components: dict[str, Any] = {}
    upstream: Any = None
    building: str | None = None
    try:
        for slot in registry.SLOTS:
            building = slot
            if slot == "dataset" and dataset is not None:
                component = dataset
            else:
                slot_spec = spec.slot(slot)
                if slot_spec is None:
                    continue
                component = _build(slot, slot_spec, upstream, context)
            components[slot] = component
            upstream = component
            if slot == "dataset":
                context.dataset = component
            if slot == "queue":
                context.batched = True
        building = None
        _refuse_empty_epochs(spec, components)
    except BaseException as error:
        if components:  # release what the slots before the failing one started
            Loader(components, spec).close()
        if isinstance(error, KeyboardInterrupt) and not isinstance(error, BuildInterrupted):
            raise BuildInterrupted(list(components), building) from None
        raise
    return Loader(components, spec)


def _build(slot: registry.Table, slot_spec: Spec, upstream: Any, context: BuildContext) -> Any:
    kind = getattr(slot_spec, "kind", None)
    if kind is None:
        kind = next(k for k in registry.available(slot) if registry.lookup(slot, k).spec is type(slot_spec))
    entry = registry.lookup(slot, kind, path=f"{slot}.kind")
    try:
        return entry.builder(slot_spec, upstream, context)
    except ConfigError as err:
        raise ConfigError([_prefixed(slot, p) for p in err.problems]) from err.__cause__


def _prefixed(slot: str, problem: ConfigProblem) -> ConfigProblem:
    """``problem`` at a path from the loader config's root (a builder may name another slot)."""
    if problem.path.split(".", 1)[0] in registry.SLOTS:
        return problem
    return ConfigProblem(f"{slot}.{problem.path}" if problem.path else slot, problem.message)


def _refuse_empty_epochs(spec: Any, components: dict[str, Any]) -> None:
    """The spec's epoch rule again, with what only building tells: the length of a ``_target_`` or
    folder dataset, the world size of ``distributed: auto``. Before the first batch, same message."""
    if spec.queue is not None or "loader" not in components or not isinstance(spec.loader, LoaderKindSpec):
        return
    try:
        length = len(components["dataset"])
    except (KeyError, TypeError):  # no dataset slot (a loader kind of its own), or an unsized stream
        return
    world_size = getattr(components["loader"], "world_size", None)
    problems = spec.loader.empty_epoch_problems(length, "len(dataset)", world_size)
    if problems:
        raise ConfigError([ConfigProblem(path, message) for path, message, _ in problems])
