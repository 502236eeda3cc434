"""Builder of the ``ram`` queue kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import IterableDataset

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.data.transforms import Compose
from loaderfactory.components.queue.dataset import QueueDataset
from loaderfactory.config.specs.queue import QueueDatasetSpec
from loaderfactory.errors import ConfigError, ConfigProblem


def build_transforms(refs: Any) -> Callable[..., Any] | None:
    """One transform from a spec, or a :class:`Compose` from a list of them."""
    if refs is None:
        return None
    if isinstance(refs, list):
        return Compose([t for t in (build_helper("transform", ref) for ref in refs) if t is not None])
    return build_helper("transform", refs)


def build_ram_queue(spec: QueueDatasetSpec, upstream: Any, context: BuildContext) -> QueueDataset:
    if upstream is None:
        raise ConfigError(
            ConfigProblem("dataset", "the queue needs a dataset slot (or dataset= in build_loader)")
        )
    if isinstance(upstream, IterableDataset) or not hasattr(upstream, "__getitem__"):
        raise ConfigError(
            ConfigProblem(
                "dataset",
                "the queue loads items by index and needs a map-style dataset, "
                f"got {type(upstream).__name__}",
            )
        )
    return QueueDataset(
        upstream,
        epoch_size=spec.epoch_size,
        mode=spec.mode,
        num_workers=spec.num_workers,
        worker_type=spec.worker_type,
        capacity=spec.capacity,
        ram_budget=spec.ram_budget,
        avg_item_size=spec.avg_item_size,
        wait_fill=spec.wait_fill,
        wait_fill_timeout=spec.wait_fill_timeout,
        sample_transforms=build_transforms(spec.sample_transforms),
        batch_transforms=build_transforms(spec.batch_transforms),
        batch_size=spec.batch_size,
        collate=build_helper("collate", spec.collate),
        log_sampling=spec.log_sampling,
        seed=spec.seed if spec.seed is not None else context.seed,
        preprocess=build_transforms(spec.preprocess),
        on_fill_timeout=spec.on_fill_timeout,
        timeout=spec.timeout,
        multiprocessing_context=spec.multiprocessing_context,
    )
