"""A shuffled epoch of shards written by ``pack``: Parquet next to tar, items/s and bytes read.

    PYTHONPATH=<checkout> python benchmarks/bench_parquet_shuffle.py [--items 3000] [--item-bytes 4096]

Packs ``--items`` items (an int id and ``--item-bytes`` random bytes) once per format into one shard
(``pack``'s own 8 MiB row groups for Parquet), then reads ``--epochs`` shuffled epochs through
``build_loader`` (the ``torch`` kind, batches of ``--batch``, ``--workers`` workers) and prints, per
format, items/s (best epoch), the file's size and the bytes the dataset read per epoch.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from loaderfactory import build_loader
from loaderfactory.shards import ShardsDataset, pack


class Blobs(Dataset[dict[str, Any]]):
    """Items of incompressible bytes, seeded by their id."""

    def __init__(self, items: int, item_bytes: int) -> None:
        self.items, self.item_bytes = items, item_bytes

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"id": i, "blob": np.random.default_rng(i).bytes(self.item_bytes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--item-bytes", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for fmt in ("tar", "parquet"):
            out = Path(folder) / fmt
            result = pack(Blobs(args.items, args.item_bytes), str(out), format=fmt, progress=False)
            size = sum(info.bytes for info in result.shards)
            shards = ShardsDataset(f"{out}/", progress=False)
            loader = {"kind": "torch", "batch_size": args.batch, "shuffle": True, "num_workers": args.workers}
            rates = []
            with build_loader({"loader": loader, "seed": 1}, dataset=shards) as run:
                for _ in range(args.epochs):
                    began, items = time.perf_counter(), 0
                    for batch in run:
                        items += len(batch["id"])
                    assert items == args.items
                    rates.append(items / (time.perf_counter() - began))
            read = shards.stats()["bytes_read"] / args.epochs
            print(
                f"{fmt:8} items/s {max(rates):9.0f}   file {size / 1e6:6.1f} MB"
                f"   read per epoch {read / 1e6:8.1f} MB"
            )


if __name__ == "__main__":
    main()
