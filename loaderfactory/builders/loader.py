"""Builder of the ``torch`` loader kind."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import IterableDataset

from loaderfactory.builders import BuildContext
from loaderfactory.builders.helpers import build_helper
from loaderfactory.components.torch_loader import ResumableDataLoader
from loaderfactory.config.specs.loader import TorchLoaderSpec
from loaderfactory.errors import ConfigError, ConfigProblem


def build_torch_loader(spec: TorchLoaderSpec, upstream: Any, context: BuildContext) -> ResumableDataLoader:
    # A DataLoader whose sampling is a function of (seed, epoch), so a run can stop and resume.
    seed = spec.seed if spec.seed is not None else context.seed
    collate = build_helper("collate", spec.collate)
    if context.batched:
        # The upstream (a queue) draws whole batches itself: pass them on unbatched.
        _refuse_batching_options(spec)
        return ResumableDataLoader(
            upstream,
            batch_size=None,
            seed=seed,
            collate_fn=collate,
            pin_memory=spec.pin_memory and torch.accelerator.is_available(),
        )
    if spec.shuffle and isinstance(upstream, IterableDataset):
        raise ConfigError(
            ConfigProblem("loader.shuffle", "cannot shuffle an iterable dataset; set it to false")
        )
    kwargs: dict[str, Any] = {}
    if spec.num_workers > 0:
        kwargs.update(
            prefetch_factor=spec.prefetch_factor,
            persistent_workers=spec.persistent_workers,
            timeout=spec.timeout or 0,
            multiprocessing_context=spec.multiprocessing_context,
        )
    return ResumableDataLoader(
        upstream,
        batch_size=spec.batch_size,
        shuffle=spec.shuffle,
        drop_last=spec.drop_last,
        seed=seed,
        num_workers=spec.num_workers,
        collate_fn=collate,
        pin_memory=spec.pin_memory and torch.accelerator.is_available(),
        **kwargs,
    )


def _refuse_batching_options(spec: TorchLoaderSpec) -> None:
    """The spec's own rules for following a queue (see ``Spec.refuse_after_batches``)."""
    problems = spec.refuse_after_batches(None)
    if problems:
        raise ConfigError([ConfigProblem(f"loader.{field}", message) for field, message, _ in problems])
