"""Builder of the ``mixture`` dataset: each source built by its own kind, then mixed."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext
from loaderfactory.config import registry
from loaderfactory.config.specs.mixture import MixtureDatasetSpec, StopAfterSamples, StopAfterSteps
from loaderfactory.config.specs.target import TargetDatasetSpec
from loaderfactory.errors import ConfigError, ConfigProblem
from loaderfactory.mixture.dataset import MixtureDataset
from loaderfactory.mixture.epochs import Steps, Stop


def build_mixture(spec: MixtureDatasetSpec, upstream: None, context: BuildContext) -> MixtureDataset:
    sources: dict[str, Any] = {}
    for name, source in spec.sources.items():
        sources[name] = built = _build_source(name, source.dataset, context)
        if len(built) == 0:
            path = f"sources.{name}.dataset"
            raise ConfigError(
                ConfigProblem(path, f"source {name!r} has no samples: give it data, or remove it")
            )
    if spec.weights is not None:
        points = [(spec.timeline_at(point.at), dict(point.weights)) for point in spec.weights]
    elif all(source.weight is None for source in spec.sources.values()):
        points = [(0, {name: float(len(dataset)) for name, dataset in sources.items()})]
    else:
        points = [(0, {name: float(source.weight or 0) for name, source in spec.sources.items()})]
    try:
        return MixtureDataset(
            sources,
            points,
            _stop(spec),
            interpolate=spec.interpolate,
            block=spec.mixing_block(),
            seed=spec.seed if spec.seed is not None else context.seed or 0,
            shuffle=spec.shuffle,
            max_repeats=spec.max_repeats,
            source_key=spec.source_key,
            unit=spec.mixing_unit(),
            unit_sizes=spec.per_source_sizes() or None,
            global_batch=spec.global_batch if spec.batching != "random" else None,
        )
    except ValueError as err:  # a source read more often than max_repeats allows
        raise ConfigError(ConfigProblem("max_repeats", str(err))) from None


def _stop(spec: MixtureDatasetSpec) -> Stop:
    """The epoch's end: steps are units with per_source batching, else global batches of samples."""
    if isinstance(spec.stop, StopAfterSamples):
        return spec.stop.samples
    if isinstance(spec.stop, StopAfterSteps):
        if spec.batching == "per_source":
            return Steps(spec.stop.steps)
        return spec.stop.steps * (spec.global_batch or 1)
    return spec.stop


def _build_source(name: str, spec: Any, context: BuildContext) -> Any:
    """The source's dataset, built by its kind; its errors located under ``sources.<name>.dataset``."""
    kind = "_target_" if isinstance(spec, TargetDatasetSpec) else spec.kind
    entry = registry.lookup("dataset", kind)
    try:
        return entry.builder(spec, None, context)
    except ConfigError as err:
        raise ConfigError([_inside(name, problem) for problem in err.problems]) from err.__cause__


def _inside(name: str, problem: ConfigProblem) -> ConfigProblem:
    """A source's problem at its path inside the mixture (the source's builder names ``dataset.*``)."""
    head, _, rest = problem.path.partition(".")
    if head in registry.SLOTS and head != "dataset":
        return problem
    inner = rest if head == "dataset" else problem.path
    return ConfigProblem(f"sources.{name}.dataset" + (f".{inner}" if inner else ""), problem.message)
