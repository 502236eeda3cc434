"""Batches out of worker processes: by value (loaderfactory's small batches) against torch's shared memory.

Two worker processes collate batches of 32 synthetic items of each size (a uint8 tensor and an int
label) with ``default_collate``; the main process takes an epoch of them. One row per item size:
items/s as torch sends batches (a shared-memory descriptor per tensor) and by value
(:class:`loaderfactory.components.workers.batch_transfer.ByValueCollate`), in the same run.

    python benchmarks/bench_batch_transfer.py [--sizes 4000,16000,32000,100000] [--batches 1000]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from loaderfactory.components.workers.batch_transfer import BY_VALUE_BYTES, ByValueCollate


class Items(Dataset[dict[str, Any]]):
    def __init__(self, count: int, size: int) -> None:
        self.count, self.size = count, size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"data": torch.full((self.size,), index % 251, dtype=torch.uint8), "label": index}


def items_per_second(size: int, batches: int, collate: Any, workers: int) -> float:
    loader = DataLoader(Items(batches * 32, size), batch_size=32, num_workers=workers, collate_fn=collate)
    start, items = time.perf_counter(), 0
    for batch in loader:
        items += len(batch["label"])
    return items / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4000,16000,32000,100000")
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"batch of 32 items, {args.workers} workers; by value up to {BY_VALUE_BYTES // 1024} KiB per batch")
    print("| item bytes | batch KiB | shared memory items/s | by value items/s | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        shared = items_per_second(size, args.batches, default_collate, args.workers)
        by_value = items_per_second(size, args.batches, ByValueCollate(default_collate), args.workers)
        kib = 32 * size // 1024
        print(f"| {size} | {kib} | {shared:,.0f} | {by_value:,.0f} | {by_value / shared:.2f} |")


if __name__ == "__main__":
    main()
