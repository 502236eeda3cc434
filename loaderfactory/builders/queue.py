"""Builder of the ``ram`` queue kind."""

from __future__ import annotations

from typing import Any

from loaderfactory.builders import BuildContext, spec_arguments
from loaderfactory.builders.distributed import detect_distributed
from loaderfactory.builders.helpers import build_helper, build_transforms
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.config.specs.queue import QueueDatasetSpec
from loaderfactory.errors import ConfigError, ConfigProblem, LimitError


def build_ram_queue(spec: QueueDatasetSpec, upstream: Any, context: BuildContext) -> QueueDataset:
    if upstream is None:
        raise ConfigError(
            ConfigProblem("dataset", "the queue needs a dataset slot (or dataset= in build_loader)")
        )
    built: dict[str, Any] = {
        "sample_transforms": build_transforms(spec.sample_transforms, "queue.sample_transforms"),
        "batch_transforms": build_transforms(spec.batch_transforms, "queue.batch_transforms"),
        "preprocess": build_transforms(spec.preprocess, "queue.preprocess"),
        "collate": build_helper("collate", spec.collate, "queue.collate"),
        "seed": _rank_seed(spec.seed if spec.seed is not None else context.seed),
    }
    try:
        # ram_budget passes as bytes or a fraction: the spec has read any size string.
        return QueueDataset(upstream, **built, **spec_arguments(spec, besides=built))
    except TypeError as err:  # the spec checked every other argument's kind
        raise ConfigError(ConfigProblem("dataset", str(err))) from err
    except LimitError as err:  # what the spec cannot know: the memory available here
        raise ConfigError(ConfigProblem(f"queue.{err.argument}", err.message)) from err
    except ValueError as err:  # an empty dataset
        raise ConfigError(ConfigProblem("queue", str(err))) from err


def _rank_seed(seed: int | None) -> int | None:
    """The queue's seed on this rank: under ``torch.distributed`` every rank holds a queue of its own,
    and the same seed would make every rank draw the same batches; rank 0 keeps ``seed``."""
    if seed is None:
        return None
    rank, _ = detect_distributed()
    return seed if rank == 0 else (seed + rank * 0x9E3779B97F4A7C15) % 2**62
