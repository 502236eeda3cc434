"""The rules across the ``sharded`` loader's arguments (``ShardedDataLoader`` and its spec)."""

from __future__ import annotations

from typing import Any

from loaderfactory.rules import Problem


def sampling_problems(
    batch_size: int | None, shuffle: bool, sampler: Any, last_batch: str, batch_sampler: Any, num_shards: int
) -> list[Problem]:
    """batch_sampler excludes batch_size, shuffle, sampler, last_batch and num_shards, and batch_size is
    required without it; a sampler excludes shuffle."""
    problems: list[Problem] = []
    if batch_sampler is not None:
        given = {
            "batch_size": batch_size,
            "shuffle": shuffle or None,
            "sampler": sampler,
            "last_batch": None if last_batch == "keep" else last_batch,
            "num_shards": None if num_shards == 1 else num_shards,
        }
        problems += [
            (
                name,
                "must not be set with batch_sampler, which decides batches and shards itself; "
                f"drop {name} (or set it to its default) or drop batch_sampler",
                value,
            )
            for name, value in given.items()
            if value is not None
        ]
    elif batch_size is None:
        problems.append(("batch_size", "required unless batch_sampler is set", None))
    if sampler is not None and shuffle:
        problems.append(("shuffle", "must be false with a sampler, which decides the order itself", True))
    return problems


def worker_problems(
    num_workers: int,
    worker_type: str,
    prefetch: int | None,
    persistent_workers: bool,
    timeout: float | None,
    multiprocessing_context: str | None,
) -> list[Problem]:
    """prefetch, persistent_workers, timeout and multiprocessing_context need num_workers >= 1,
    multiprocessing_context also worker_type: process."""
    if num_workers == 0:
        given = {
            "prefetch": prefetch,
            "persistent_workers": persistent_workers or None,
            "timeout": timeout,
            "multiprocessing_context": multiprocessing_context,
        }
        return [
            (name, f"needs workers, but num_workers is 0; set num_workers >= 1 or drop {name}", value)
            for name, value in given.items()
            if value is not None
        ]
    if worker_type == "thread" and multiprocessing_context is not None:
        message = "applies to process workers; drop it or set worker_type: process"
        return [("multiprocessing_context", message, multiprocessing_context)]
    return []
