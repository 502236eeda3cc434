"""One rank of the shards kind's real multi-process checks; ``tests/shards/test_shards_ddp.py`` runs it.

    torchrun --standalone --nproc_per_node=N tests/support/shards_ddp_scenarios.py OUT \
        SCENARIOS DATA [--steps K] [--workers 0,2] [--saved-workers 0,2] [:: SCENARIOS DATA ...]

SCENARIOS is one name or several, comma-separated: they run one after the other in one process group
(starting one costs seconds); ``::`` starts another group of scenarios, with its own DATA and
options, in the same process group. DATA is a folder of tar shards whose ``cls`` field is each
sample's id. Scenarios, each for the ``torch`` and the ``sharded`` kind (``shuffle_window: 2``, ``balance:
uneven`` unless said otherwise):

* ``parts``: counts, per rank, how often it listed the shards or read/built the index while
  building, and writes the ids it loaded in two epochs.
* ``balanced``: one epoch under ``balance: pad`` and one under ``drop``: the ids and the steps.
* ``save``: for each worker count of ``--workers``, takes K batches and writes their ids; rank 0
  also writes its state to OUT.
* ``resume``: for each worker count of ``--workers``, loads the state saved (at another world size)
  with the matching count of ``--saved-workers`` and writes the rest of the epoch and the shards the
  rank's processes opened for it.
* ``missing``: builds over a folder that does not exist and writes the error each rank raised.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

import loaderfactory
from loaderfactory.shards import INDEX_NAME, Storage
from loaderfactory.shards.index import found_shards
from loaderfactory.shards.read.reader import ShardReader

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
found_shards.build_index = _counted("build index", found_shards.build_index)
OPENED_LOG: list[Path | None] = [None]
"""Where every process of this rank (DataLoader workers forked from it too) logs the shards it opens."""


def _logged(url: str) -> None:
    log = OPENED_LOG[0]
    if log is not None:
        with log.open("a") as out:  # one short appended line: whole, whatever process writes it
            out.write(f"{url}\n")


OPEN_SHARD, OPEN_LOCAL = ShardReader.open_shard, ShardReader.open_local


def _open_shard(self: Any, info: Any) -> Any:
    _logged(info.url)
    return OPEN_SHARD(self, info)


def _open_local(self: Any, number: int) -> Any:  # opened ahead of its reads
    _logged(self.shards[number].url)
    return OPEN_LOCAL(self, number)


ShardReader.open_shard = _open_shard  # type: ignore[method-assign]
ShardReader.open_local = _open_local  # type: ignore[method-assign]


def build(kind: str, data: str, balance: str = "uneven", workers: int = 0) -> loaderfactory.Loader:
    dataset = {"kind": "shards", "urls": f"{data}/", "shuffle_window": 2, "open_shards": 2}
    loader = {"kind": kind, "batch_size": 4, "shuffle": True, "balance": balance, "num_workers": workers}
    return loaderfactory.build_loader({"dataset": dataset, "loader": loader, "seed": 11})


def ids(batches: Any) -> list[int]:
    return [int(i) for batch in batches for i in batch["cls"]]


def parts(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    CALLS.clear()
    with build(kind, args.data) as loader:
        calls = dict(CALLS)
        return {"calls": calls, "epochs": [ids(loader) for _ in range(2)]}


def balanced(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    record = {}
    for balance in ("pad", "drop"):
        with build(kind, args.data, balance=balance) as loader:
            batches = [ids([batch]) for batch in loader]
            flat = [i for batch in batches for i in batch]
            record[balance] = {"ids": flat, "steps": len(batches), "len": len(loader)}
    return record


def save(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    record = {}
    for workers in args.workers:
        with build(kind, args.data, workers=workers) as loader:
            head = ids(itertools.islice(iter(loader), args.steps))
            if dist.get_rank() == 0:
                (args.out / f"state.{kind}.w{workers}.json").write_text(json.dumps(loader.state_dict()))
        record[str(workers)] = {"head": head}
    return record


def resume(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    record = {}
    for workers, saved in zip(args.workers, args.saved_workers or args.workers, strict=True):
        log = OPENED_LOG[0] = args.out / f"opened.{kind}.{saved}-{workers}.rank{dist.get_rank()}.log"
        with build(kind, args.data, workers=workers) as loader:
            loader.load_state_dict(json.loads((args.out / f"state.{kind}.w{saved}.json").read_text()))
            rest, length = ids(loader), len(loader)
        OPENED_LOG[0] = None
        opened = sorted(set(log.read_text().splitlines())) if log.exists() else []
        record[f"{saved}->{workers}"] = {"rest": rest, "len": length, "opened": opened}
    return record


def missing(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        build(kind, f"{args.data}/nowhere").close()
    except Exception as err:  # noqa: BLE001 - the error is what this scenario records
        return {"error": f"{type(err).__name__}: {err}"}
    return {"error": None}


SCENARIOS = {"parts": parts, "balanced": balanced, "save": save, "resume": resume, "missing": missing}


def _counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenarios", type=lambda names: names.split(","))
    parser.add_argument("data")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workers", type=_counts, default=[0])
    parser.add_argument("--saved-workers", type=_counts, default=None)
    return parser


def _groups(argv: list[str]) -> list[argparse.Namespace]:
    """``OUT GROUP [:: GROUP ...]``: each group's scenarios, data and options, all writing to OUT."""
    out, groups, current = Path(argv[0]), [], []
    for arg in [*argv[1:], "::"]:
        if arg != "::":
            current.append(arg)
            continue
        groups.append(_parser().parse_args(current, argparse.Namespace(out=out)))
        current = []
    return groups


def main() -> None:
    groups = _groups(sys.argv[1:])
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for args in groups:
        for scenario in args.scenarios:
            record = {kind: SCENARIOS[scenario](kind, args) for kind in KINDS}
            (args.out / f"{scenario}-w{world_size}-rank{rank}.json").write_text(json.dumps(record))
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
