"""Builder of the ``sharded`` loader kind; reads the distributed environment once, here at the edge."""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import IterableDataset

from loaderfactory.builders import BuildContext, spec_arguments
from loaderfactory.builders.distributed import resolve_distributed
from loaderfactory.builders.helpers import build_helper
from loaderfactory.builders.targets import instantiate_with_dataset
from loaderfactory.components.steps import ShardedDataLoader
from loaderfactory.config.specs.sharded import ShardedLoaderSpec
from loaderfactory.config.specs.target import SamplerTargetSpec
from loaderfactory.errors import ArgumentError, ConfigError, ConfigProblem


def build_sharded_loader(spec: ShardedLoaderSpec, upstream: Any, context: BuildContext) -> ShardedDataLoader:
    if context.batched:
        problems = spec.refuse_after_batches(None)
        raise ConfigError([ConfigProblem(f"loader.{field}", message) for field, message, _ in problems])
    if isinstance(upstream, IterableDataset) or not hasattr(upstream, "__getitem__"):
        raise ConfigError(
            ConfigProblem(
                "loader.kind",
                f"sharded needs a map-style dataset (len and [i]); a {type(upstream).__name__} can only be "
                "iterated: use loader=torch",
            )
        )
    rank, world_size = resolve_distributed(spec.distributed)
    built: dict[str, Any] = {
        "sampler": _build_sampler(spec.sampler, upstream, "loader.sampler"),
        "batch_sampler": _build_sampler(spec.batch_sampler, upstream, "loader.batch_sampler"),
        "collate": build_helper("collate", spec.collate, "loader.collate"),
        "seed": spec.seed if spec.seed is not None else context.seed,
    }
    try:
        loader = ShardedDataLoader(
            upstream,
            rank=rank,
            world_size=world_size,
            **built,
            **spec_arguments(spec, besides={*built, "distributed"}),
        )
    except ArgumentError as err:
        raise ConfigError(ConfigProblem(_config_path(err.argument), str(err))) from err
    empty = loader.planner.why_empty()
    if empty is not None:
        # A warning, not an error: the dataset's length is data, not config (a small validation
        # split may be meant to be cut), and a training loop over zero steps would say nothing.
        field, reason = empty
        warnings.warn(f"loader.{field}: {reason}", UserWarning, stacklevel=2)
    return loader


def _config_path(argument: str) -> str:
    """The config field of a constructor argument (``rank`` and ``world_size`` come from ``distributed``)."""
    if argument in ("rank", "world_size"):
        argument = "distributed"
    return f"loader.{argument}" if argument in ShardedLoaderSpec.model_fields else "loader"


def _build_sampler(spec: SamplerTargetSpec | None, dataset: Any, path: str) -> Any:
    return None if spec is None else instantiate_with_dataset(spec, path, dataset)
