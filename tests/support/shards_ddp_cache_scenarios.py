"""One rank of the shared shards cache's real multi-process checks; ``tests/shards/test_shards_ddp_cache.py``
runs it.

    torchrun --standalone --nproc_per_node=2 tests/support/shards_ddp_cache_scenarios.py OUT URL DATA CACHE \
        [--limit BYTES] [--scenarios cached,limited,unindexed,uneven]

URL serves the folder DATA over HTTP from a loopback server of the test's that logs every request.
DATA has one folder of tar shards (``train-000000.tar``..., whose ``cls`` field is each sample's id)
per remote run: ``w0``, ``w2`` and ``limited`` with their index beside them, ``unindexed`` without.
A remote run reads its own folder (so the server's log tells the runs apart) through its own
``cache.dir``, ``CACHE/<folder>``, which both ranks share. Once every rank has built its loader,
rank 0 GETs ``URL/__mark__/<folder>``: the server's log then separates what building read from what
the epochs fetched. Every scenario records, per rank, to ``OUT/<scenario>-rank<r>.json``; the loaders
are of the ``torch`` kind with ``shuffle: true``, ``shuffle_window: 2``, ``balance: uneven``:

* ``cached``: two epochs over ``w0`` with 0 workers, then over ``w2`` with 2: the ids of each epoch
  and the dataset's ``stats()`` (the run report's ``shards`` section: fetches, hits, evictions).
* ``limited``: the same over ``limited`` with 0 workers and ``cache.limit`` BYTES.
* ``unindexed``: over ``unindexed``: how often the rank called ``build_index`` and read storage
  while building, ``len()`` of the dataset and the loader, and the ids of two epochs.
* ``uneven``: one epoch over the local folder ``DATA/w0`` for the ``torch`` and ``sharded`` kinds,
  two samples a batch: ``len()``, the batches drawn and their ids.
"""

from __future__ import annotations

import argparse
import functools
import json
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist

import loaderfactory
from loaderfactory.shards import Storage
from loaderfactory.shards.find import find_shards
from loaderfactory.shards.index import found_shards
from loaderfactory.shards.storage.store import split_scheme

SEED = 5
EPOCHS = 2
SHARDS = "train-{000000..000006}.tar"
"""The 7 shards of each folder; the test writes as many."""
MARK = "/__mark__/"
Record = dict[str, Any]
CALLS: Counter[str] = Counter()
"""What this rank read from storage, and how often it built an index, since the last ``clear()``."""


def _counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function(storage, url, ...)`` counted as ``"<name> <scheme>"``: ``"read_range http"``."""

    @functools.wraps(function)
    def counting(storage: Storage, url: str, *args: Any, **kwargs: Any) -> Any:
        CALLS[f"{name} {split_scheme(url)[0]}"] += 1
        return function(storage, url, *args, **kwargs)

    return counting


BUILD_INDEX = found_shards.build_index


def _build_index(urls: Sequence[str], *args: Any, **kwargs: Any) -> Any:
    CALLS["build index"] += 1
    CALLS["shards indexed"] += len(urls)
    return BUILD_INDEX(urls, *args, **kwargs)


for _method in ("list", "size", "read", "read_range"):
    setattr(Storage, _method, _counted(_method, getattr(Storage, _method)))
found_shards.build_index = _build_index


def build(urls: str, cache: dict[str, Any] | None = None, **loader: Any) -> loaderfactory.Loader:
    """The loader of the scenarios over ``urls``; ``loader`` settings replace the defaults."""
    dataset = {"kind": "shards", "urls": urls, "shuffle_window": 2, "open_shards": 2, "cache": cache}
    defaults = {"kind": "torch", "batch_size": 4, "shuffle": True, "balance": "uneven", "num_workers": 0}
    config = {"dataset": dataset, "loader": defaults | loader, "seed": SEED}
    return loaderfactory.build_loader(config)


def ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def _remote(args: argparse.Namespace, folder: str, workers: int = 0, limit: int | None = None) -> Record:
    """Two epochs over the served ``folder`` through ``CACHE/<folder>``, marked at the server between
    building and reading; what building read, the epochs' ids and the dataset's stats."""
    CALLS.clear()
    cache = {"dir": str(args.cache / folder), "limit": limit}
    with build(f"{args.url}/{folder}/{SHARDS}", cache, num_workers=workers) as loader:
        built = dict(CALLS)
        dist.barrier()  # every rank built: what the server saw so far is what building read
        if dist.get_rank() == 0:
            with urllib.request.urlopen(f"{args.url}{MARK}{folder}", timeout=30) as answer:
                answer.read()
        dist.barrier()
        dataset = find_shards(list(loader.components.values()))
        assert dataset is not None
        epochs = [ids(loader) for _ in range(EPOCHS)]
        return {
            "built": built,
            "epochs": epochs,
            "stats": dataset.stats(),
            "dataset_len": len(dataset),
            "loader_len": len(loader),
        }


def cached(args: argparse.Namespace) -> Record:
    return {"w0": _remote(args, "w0"), "w2": _remote(args, "w2", workers=2)}


def limited(args: argparse.Namespace) -> Record:
    return _remote(args, "limited", limit=args.limit)


def unindexed(args: argparse.Namespace) -> Record:
    return _remote(args, "unindexed")


def uneven(args: argparse.Namespace) -> Record:
    record = {}
    for kind in ("torch", "sharded"):
        with build(f"{args.data / 'w0'}/", kind=kind, batch_size=2) as loader:
            batches = [ids([batch]) for batch in loader]
            record[kind] = {"len": len(loader), "steps": len(batches), "ids": [i for b in batches for i in b]}
    return record


SCENARIOS = {"cached": cached, "limited": limited, "unindexed": unindexed, "uneven": uneven}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("url")
    parser.add_argument("data", type=Path)
    parser.add_argument("cache", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--scenarios", type=lambda names: names.split(","), default=list(SCENARIOS))
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for scenario in args.scenarios:
        record = SCENARIOS[scenario](args)
        (args.out / f"{scenario}-rank{rank}.json").write_text(json.dumps(record))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
