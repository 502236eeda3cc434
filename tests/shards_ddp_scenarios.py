"""One rank of the shards kind's real multi-process checks; ``tests/test_shards_ddp.py`` runs it.

    torchrun --standalone --nproc_per_node=N tests/shards_ddp_scenarios.py SCENARIO OUT DATA [--steps K]

DATA is a folder of tar shards whose ``cls`` field is each sample's id. Scenarios, each for the
``torch`` and the ``sharded`` kind (``shuffle_window: 2``, ``balance: uneven``):

* ``parts``: counts, per rank, how often it listed the shards or read/built the index while
  building, and writes the ids it loaded in two epochs.
* ``save``: takes K batches and writes their ids; rank 0 also writes its state to OUT.
* ``resume``: loads that state (saved at another world size) and writes the rest of the epoch.
* ``missing``: builds over a folder that does not exist and writes the error each rank raised.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

import loaderfactory
from loaderfactory.shards import INDEX_NAME, Storage
from loaderfactory.shards import dataset as shards_dataset

KINDS = ("torch", "sharded")
CALLS: Counter[str] = Counter()


def _counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def counting(*args: Any, **kwargs: Any) -> Any:
        CALLS[name] += 1
        return function(*args, **kwargs)

    return counting


def _read(self: Storage, url: str, *, _read: Callable[..., bytes] = Storage.read) -> bytes:
    if url.endswith(INDEX_NAME):
        CALLS["read index"] += 1
    return _read(self, url)


# What a rank lists and reads while it finds its shards: the storage's listing and the index file.
Storage.list = _counted("list", Storage.list)  # type: ignore[method-assign]
Storage.read = _read  # type: ignore[method-assign]
shards_dataset.build_index = _counted("build index", shards_dataset.build_index)


def build(kind: str, data: str) -> loaderfactory.Loader:
    dataset = {"kind": "shards", "urls": f"{data}/", "shuffle_window": 2, "open_shards": 2}
    loader = {"kind": kind, "batch_size": 4, "shuffle": True, "balance": "uneven"}
    return loaderfactory.build_loader({"dataset": dataset, "loader": loader, "seed": 11})


def ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def parts(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    CALLS.clear()
    with build(kind, args.data) as loader:
        calls = dict(CALLS)
        return {"calls": calls, "epochs": [ids(loader) for _ in range(2)]}


def save(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind, args.data) as loader:
        head = ids(itertools.islice(iter(loader), args.steps))
        if dist.get_rank() == 0:
            (args.out / f"state.{kind}.json").write_text(json.dumps(loader.state_dict()))
    return {"head": head}


def resume(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with build(kind, args.data) as loader:
        loader.load_state_dict(json.loads((args.out / f"state.{kind}.json").read_text()))
        return {"rest": ids(loader), "len": len(loader)}


def missing(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        build(kind, f"{args.data}/nowhere").close()
    except Exception as err:  # noqa: BLE001 - the error is what this scenario records
        return {"error": f"{type(err).__name__}: {err}"}
    return {"error": None}


SCENARIOS = {"parts": parts, "save": save, "resume": resume, "missing": missing}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("out", type=Path)
    parser.add_argument("data")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    record = {kind: SCENARIOS[args.scenario](kind, args) for kind in KINDS}
    (args.out / f"{args.scenario}-w{world_size}-rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
