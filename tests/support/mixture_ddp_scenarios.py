"""One rank of the mixture's real multi-process checks; ``tests/mixture/test_mixture_ddp.py`` runs it.

    torchrun --standalone --nproc_per_node=N tests/support/mixture_ddp_scenarios.py OUT [--resume W]

Builds a scheduled mixture behind the ``torch`` and the ``sharded`` loader (``workers`` 0 and 2 for
``sharded``), and a ``per_source`` mixture whose sources have their own global batch behind the
``torch`` loader (``workers`` 2) and, for each, writes what this rank read: with ``--resume W``, the
rest of the epoch after loading the state rank 0 saved at world size ``W``; then, from a fresh
loader, ``STEPS`` batches, after which rank 0 saves the state for the next world size.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import torch.distributed as dist

import loaderfactory

STEPS = 3
LOADERS = {
    "torch": ("torch", 0),
    "sharded": ("sharded", 0),
    "sharded-workers": ("sharded", 2),
    "batch-sizes": ("torch", 2),
}
SOURCES = (("web", 37, 1), ("code", 23, 2), ("books", 11, 3))
GLOBAL_BATCHES = {"web": 12, "code": 24, "books": 36}
"""Samples per global step of each source in ``batch-sizes``: each splits evenly over 2, 3 or 4 ranks."""
BATCH_SIZE_STEPS = 30


def source_configs() -> dict[str, Any]:
    return {
        name: {
            "dataset": {"kind": "synthetic", "length": length, "seed": seed, "fields": {"x": {"shape": [1]}}}
        }
        for name, length, seed in SOURCES
    }


def config(name: str, world_size: int = 1) -> dict[str, Any]:
    """``batch-sizes``: :func:`batch_sizes_config`; else three synthetic sources of uneven sizes on a
    linear schedule, 240 samples an epoch."""
    kind, workers = LOADERS[name]
    if name == "batch-sizes":
        return batch_sizes_config(world_size)
    sources = source_configs()
    weights = [
        {"at": 0, "weights": {"web": 0.7, "code": 0.2, "books": 0.1}},
        {"at": 200, "weights": {"web": 0.2, "code": 0.3, "books": 0.5}},
    ]
    dataset = {
        "kind": "mixture",
        "sources": sources,
        "weights": weights,
        "interpolate": "linear",
        "stop": {"samples": 240},
        "block": 16,
        "source_key": "source",
    }
    loader = {"kind": kind, "batch_size": 4, "shuffle": True, "balance": "uneven", "num_workers": workers}
    return {"dataset": dataset, "loader": loader, "seed": 5}


def batch_sizes_config(world_size: int) -> dict[str, Any]:
    """The same sources, ``per_source``, each with its own global batch, 30 global steps an epoch."""
    sources = source_configs()
    for name, size in GLOBAL_BATCHES.items():
        sources[name]["global_batch"] = size
    dataset = {
        "kind": "mixture",
        "sources": sources,
        "batching": "per_source",
        "global_batch": 12,
        "stop": {"steps": BATCH_SIZE_STEPS},
        "block": 8,
        "source_key": "source",
    }
    loader = {"kind": "torch", "batch_size": 12 // world_size, "shuffle": True, "num_workers": 2}
    return {"dataset": dataset, "loader": loader, "seed": 5}


def draws(batches: Any) -> list[list[Any]]:
    return [
        [source, int(index)]
        for batch in batches
        for source, index in zip(batch["source"], batch["index"], strict=True)
    ]


def batch_sources(batches: Any) -> list[list[Any]]:
    """Each batch's distinct sources and its size."""
    return [[sorted(set(batch["source"])), len(batch["source"])] for batch in batches]


def run(name: str, out: Path, resume: int | None) -> dict[str, Any]:
    made = config(name, dist.get_world_size())
    record: dict[str, Any] = {}
    if resume is not None:
        with loaderfactory.build_loader(made) as loader:
            loader.load_state_dict(json.loads((out / f"state.{name}.w{resume}.json").read_text()))
            batches = list(loader)
            record.update(rest=draws(batches), len=len(loader), batches=batch_sources(batches))
    with loaderfactory.build_loader(made) as loader:
        record["head"] = draws(itertools.islice(iter(loader), STEPS))
        if dist.get_rank() == 0:
            state = json.dumps(loader.state_dict())
            (out / f"state.{name}.w{dist.get_world_size()}.json").write_text(state)
    return record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--resume", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    record = {name: run(name, args.out, args.resume) for name in LOADERS}
    (args.out / f"w{world_size}-rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
