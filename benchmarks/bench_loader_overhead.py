"""What the ``Loader`` costs per batch over the bare components it is built from, in one run.

    python benchmarks/bench_loader_overhead.py [--batches 20000] [--repeats 5]

Rows (µs per batch, median of the repeats, cheapest items so the bookkeeping shows):
  bare DataLoader            torch's DataLoader, batch_size 1, no workers
  bare ThreadBuffer          ThreadBuffer(DataLoader, buffer_size 4)
  Loader torch+prefetch      build_loader(torch bs=1 + prefetch thread 4): the same two components
  Loader, resumable          the same, after a state_dict() call (upstream snapshots taken)
Ratios are against the bare ThreadBuffer; the goal is <= 1.15.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader

import loaderfactory
from loaderfactory.components.thread.buffer import ThreadBuffer

ITEMS = [torch.tensor(i) for i in range(64)]


def per_batch_us(make: Callable[[], Iterable[Any]], batches: int) -> float:
    source = make()
    drawn = 0
    started = time.perf_counter()
    while drawn < batches:
        for _ in source:
            drawn += 1
            if drawn == batches:
                break
    elapsed = time.perf_counter() - started
    close = getattr(source, "close", None)
    if callable(close):
        close()
    return elapsed / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = {"loader": {"kind": "torch", "batch_size": 1}, "prefetch": {"kind": "thread", "buffer_size": 4}}

    def saved_loader() -> loaderfactory.Loader:
        loader = loaderfactory.build_loader(config, dataset=ITEMS)
        loader.state_dict()
        return loader

    rows: dict[str, Callable[[], Iterable[Any]]] = {
        "bare DataLoader": lambda: DataLoader(ITEMS, batch_size=1),  # type: ignore[arg-type]
        "bare ThreadBuffer": lambda: ThreadBuffer(DataLoader(ITEMS, batch_size=1), buffer_size=4),  # type: ignore[arg-type]
        "Loader torch+prefetch": lambda: loaderfactory.build_loader(config, dataset=ITEMS),
        "Loader, resumable": saved_loader,
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeats):  # alternate the rows so drift on a shared machine hits all alike
        for name, make in rows.items():
            times[name].append(per_batch_us(make, args.batches))
    base = statistics.median(times["bare ThreadBuffer"])
    print(f"{'':24} {'µs/batch':>9} {'vs bare ThreadBuffer':>21}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:24} {median:9.1f} {median / base:20.2f}x")


if __name__ == "__main__":
    main()
