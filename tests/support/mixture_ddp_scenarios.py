"""One rank of the mixture's real multi-process checks; ``tests/mixture/test_mixture_ddp.py`` runs it.

    torchrun --standalone --nproc_per_node=N tests/support/mixture_ddp_scenarios.py OUT [--resume W]

Builds a scheduled mixture behind the ``torch`` and the ``sharded`` loader (``workers`` 0 and 2 for
``sharded``) and, for each, writes what this rank read: with ``--resume W``, the rest of the epoch
after loading the state rank 0 saved at world size ``W``; then, from a fresh loader, ``STEPS``
batches, after which rank 0 saves the state for the next world size.
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
LOADERS = {"torch": ("torch", 0), "sharded": ("sharded", 0), "sharded-workers": ("sharded", 2)}


def config(kind: str, workers: int) -> dict[str, Any]:
    """Three synthetic sources of uneven sizes on a linear schedule, 240 samples an epoch."""
    sources = {
        name: {
            "dataset": {"kind": "synthetic", "length": length, "seed": seed, "fields": {"x": {"shape": [1]}}}
        }
        for name, length, seed in (("web", 37, 1), ("code", 23, 2), ("books", 11, 3))
    }
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


def draws(batches: Any) -> list[list[Any]]:
    return [
        [source, int(index)]
        for batch in batches
        for source, index in zip(batch["source"], batch["index"], strict=True)
    ]


def run(name: str, out: Path, resume: int | None) -> dict[str, Any]:
    kind, workers = LOADERS[name]
    record: dict[str, Any] = {}
    if resume is not None:
        with loaderfactory.build_loader(config(kind, workers)) as loader:
            loader.load_state_dict(json.loads((out / f"state.{name}.w{resume}.json").read_text()))
            record["rest"], record["len"] = draws(loader), len(loader)
    with loaderfactory.build_loader(config(kind, workers)) as loader:
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
