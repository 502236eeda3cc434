"""The sharded loader built and iterated directly vs inside a ``Loader`` vs torch's DataLoader, in
ONE process, in rotating order: does the order of loaders in a process, or worker start-up, change
what one of them reaches?

    python benchmarks/bench_sharded_standalone.py [--items 1280] [--rounds 3]

Each round runs every row once, starting with a different row (so each row runs first once); each
row is a fresh loader with 2 worker processes over a CPU-bound dataset (about 2 ms of numpy work
per item, batch 32). Prints items/s per row and round, the median, and the ratio to torch's
DataLoader.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from bench_sharded import CpuBound  # the workload of bench_sharded.py
from torch.utils.data import DataLoader

import loaderfactory
from loaderfactory.components.steps import ShardedDataLoader


def items_per_s(make: Callable[[], Iterable[Any]], items: int) -> float:
    loader = make()
    started = time.perf_counter()
    seen = sum(len(batch["y"]) for batch in loader)
    elapsed = time.perf_counter() - started
    close = getattr(loader, "close", None)
    if callable(close):
        close()
    assert seen == items, seen
    return items / elapsed


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--items", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = CpuBound(args.items, reps=40)
    config = {"loader": {"kind": "sharded", "batch_size": 32, "num_workers": 2, "distributed": "off"}}
    rows: dict[str, Callable[[], Iterable[Any]]] = {
        "sharded, standalone": lambda: ShardedDataLoader(dataset, 32, num_workers=2),
        "sharded, in a Loader": lambda: loaderfactory.build_loader(config, dataset=dataset),
        "torch DataLoader": lambda: DataLoader(dataset, batch_size=32, num_workers=2),  # type: ignore[arg-type]
    }
    names = list(rows)
    results: dict[str, list[float]] = {name: [] for name in names}
    for number in range(args.rounds):
        order = names[number % len(names) :] + names[: number % len(names)]
        for name in order:
            results[name].append(items_per_s(rows[name], args.items))
    base = statistics.median(results["torch DataLoader"])
    print(f"{'row':22} {'items/s per round':>30} {'median':>8} {'vs DataLoader':>14}")
    for name in names:
        values = results[name]
        median = statistics.median(values)
        shown = " ".join(f"{v:7.0f}" for v in values)
        print(f"{name:22} {shown:>30} {median:8.0f} {median / base:13.2f}x")


if __name__ == "__main__":
    main()
