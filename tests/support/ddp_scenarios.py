"""One rank of the order engine's real multi-process checks; ``tests/components/test_ddp_order.py`` runs it.

    torchrun --standalone --nproc_per_node=N tests/support/ddp_scenarios.py SCENARIOS OUT \
        [--state FILE] [--steps K]

SCENARIOS is one name or several, comma-separated: they run one after the other in one process group
(starting one costs seconds).
Scenarios (each for the ``torch`` and the ``sharded`` kind, no seed anywhere unless the
environment has one):

* ``noseed``: two epochs; writes the indices this rank loaded per epoch.
* ``rank0``: takes K batches, loads rank 0's state into a fresh loader on every rank, and writes
  what the fresh loader yields next beside what the first one yields next (they must be equal).
* ``save``: takes K batches and writes them; rank 0 also writes its state to FILE.
* ``resume``: loads FILE (saved at another world size, say) and writes the rest of that epoch.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import torch.distributed as dist

import loaderfactory

LENGTH = 103
KINDS: dict[str, dict[str, Any]] = {
    "torch": {"kind": "torch", "batch_size": 4, "shuffle": True, "balance": "uneven"},
    "sharded": {"kind": "sharded", "batch_size": 4, "shuffle": True, "balance": "uneven"},
}


def build(kind: str) -> loaderfactory.Loader:
    return loaderfactory.build_loader({"loader": KINDS[kind]}, dataset=list(range(LENGTH)))


def indices(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch]


def noseed(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind) as loader:
        return {"epochs": [indices(loader) for _ in range(2)], "len": len(loader)}


def rank0(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind) as first:
        batches = iter(first)
        head = indices(itertools.islice(batches, args.steps))
        shared = [first.state_dict() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        expected = indices(batches) + indices(first)  # the rest of the epoch, then the next one
    with build(kind) as fresh:
        fresh.load_state_dict(shared[0])
        got = indices(fresh) + indices(fresh)
    return {"head": head, "expected": expected, "got": got}


def save(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind) as loader:
        head = indices(itertools.islice(iter(loader), args.steps))
        if dist.get_rank() == 0:
            Path(f"{args.state}.{kind}.json").write_text(json.dumps(loader.state_dict()))
    return {"head": head}


def resume(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind) as loader:
        loader.load_state_dict(json.loads(Path(f"{args.state}.{kind}.json").read_text()))
        length = len(loader)
        rest = [[int(i) for i in batch] for batch in loader]
    return {"rest": [i for batch in rest for i in batch], "batches": len(rest), "len": length}


SCENARIOS = {"noseed": noseed, "rank0": rank0, "save": save, "resume": resume}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenarios", type=lambda names: names.split(","))
    parser.add_argument("out", type=Path)
    parser.add_argument("--state", default="")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for scenario in args.scenarios:
        record = {kind: SCENARIOS[scenario](kind, args) for kind in KINDS}
        record["world_size"] = world_size
        (args.out / f"{scenario}-w{world_size}-rank{rank}.json").write_text(json.dumps(record))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
