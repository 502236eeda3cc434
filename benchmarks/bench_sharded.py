"""Throughput of the ``sharded`` loader against ``torch.utils.data.DataLoader``, and of its transport.

    python benchmarks/bench_sharded.py [--items 1280] [--repeats 2]

1. items/s on a CPU-bound dataset (about 2 ms of numpy work per item, batch 32) with 0, 1 and 2
   process workers, for ``ShardedDataLoader`` and ``DataLoader`` with the same workers (workers
   started per epoch in both; best of ``--repeats`` epochs).
2. MB/s of 1 MiB tensors coming out of 2 worker processes: through shared memory (the loader's
   transport) vs as pickled bytes (what gluon-nlp's loader sends).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loaderfactory.components.steps import ShardedDataLoader


class CpuBound:
    """Item ``i``: ``reps`` rounds of element-wise numpy work (single-threaded) on 4096 floats."""

    def __init__(self, length: int, reps: int) -> None:
        self.length, self.reps = length, reps
        self.base = np.linspace(0.0, 1.0, 4096)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        x = self.base + index
        for _ in range(self.reps):
            x = np.sin(x) * 1.0001 + np.cos(x)
        return {"x": torch.from_numpy(x[:64].astype(np.float32)), "y": index % 10}


class Megabyte:
    """Item ``i``: a 1 MiB float32 tensor."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2**18,), float(index))


def first(items: list[Any]) -> Any:
    return items[0]


def pickled(items: list[Any]) -> bytes:
    return pickle.dumps(items[0], protocol=pickle.HIGHEST_PROTOCOL)


def calibrate(target_ms: float = 2.0) -> int:
    probe = CpuBound(64, 20)
    for i in range(64):  # warm up: the first calls are slower
        probe[i]
    start = time.perf_counter()
    for i in range(64):
        probe[i]
    per_rep = (time.perf_counter() - start) / (64 * 20)
    return max(1, round(target_ms / 1000 / per_rep))


def items_per_s(loader: Any, items: int, repeats: int) -> float:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        count = sum(len(batch["y"]) for batch in loader)
        elapsed = time.perf_counter() - start
        assert count == items, (count, items)
        best = max(best, count / elapsed)
    return best


def megabytes_per_s(loader: Any, decode: bool, repeats: int) -> float:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for batch in loader:
            tensor = pickle.loads(batch) if decode else batch
            total += tensor.nbytes
        best = max(best, total / 2**20 / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tensors", type=int, default=512, help="1 MiB tensors per transport run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    reps = calibrate()
    dataset = CpuBound(args.items, reps)
    start = time.perf_counter()
    for i in range(50):
        dataset[i]
    item_ms = (time.perf_counter() - start) / 50 * 1000
    print(f"CPU-bound dataset: {item_ms:.2f} ms per item here, batch 32, {args.items} items per epoch")
    print()
    print(f"{'workers':>7} | {'sharded items/s':>15} | {'DataLoader items/s':>18} | {'ratio':>5}")
    print(f"{'-' * 7}-+-{'-' * 15}-+-{'-' * 18}-+-{'-' * 5}")
    for workers in (0, 1, 2):
        ours = theirs = 0.0
        # Alternate the two loaders so a noisy neighbour on the machine hurts both alike.
        for _ in range(args.repeats):
            with ShardedDataLoader(dataset, batch_size=32, num_workers=workers) as sharded:
                ours = max(ours, items_per_s(sharded, args.items, 1))
            theirs = max(
                theirs, items_per_s(DataLoader(dataset, batch_size=32, num_workers=workers), args.items, 1)
            )
        print(f"{workers:>7} | {ours:>15.0f} | {theirs:>18.0f} | {ours / theirs:>5.2f}")
    print()
    print(f"{'transport (2 workers, 1 MiB tensors)':<38} | {'MB/s':>7}")
    print(f"{'-' * 38}-+-{'-' * 7}")
    source = Megabyte(args.tensors)
    for label, collate, decode in (
        ("shared memory (sharded)", first, False),
        ("pickled bytes (gluon-nlp)", pickled, True),
    ):
        with ShardedDataLoader(source, batch_size=1, collate=collate, num_workers=2) as loader:
            rate = megabytes_per_s(loader, decode, args.repeats)
        print(f"{label:<38} | {rate:>7.0f}")


if __name__ == "__main__":
    main()
