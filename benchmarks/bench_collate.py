"""Collate throughput: allocating collate functions against ``RingCollate``'s reused buffers.

    python benchmarks/bench_collate.py               # 32 x 1 MiB float32 items, 5 passes of 40 batches
    python benchmarks/bench_collate.py --quick       # a smoke run

Part 1 calls each collate function directly (in-process, as with ``num_workers=0`` or thread
workers) on dict items (``{"vol": 1 MiB tensor, "label": int}``) and on plain tensors. Part 2
draws the same batches through ``torch.utils.data.DataLoader``, in the main process and with
worker processes (where torch's ``default_collate`` itself stacks into a new shared-memory tensor).
GB/s is batch bytes (10^9) per second, the median (and best) of ``--repeats`` passes, the rows'
passes interleaved; ``x alloc`` is the ratio of medians to the allocating ``default_collate`` on
the same items, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from loaderfactory.components.data.collate import DictCollate
from loaderfactory.components.data.ring_collate import RingCollate

MIB_FLOATS = 2**20 // 4


class Pool(Dataset[Any]):
    """``length`` items cycling over ``distinct`` preallocated tensors, as dicts or plain tensors."""

    def __init__(self, length: int, distinct: int, dicts: bool) -> None:
        self.tensors = [torch.rand(MIB_FLOATS) for _ in range(distinct)]
        self.length = length
        self.dicts = dicts

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        tensor = self.tensors[index % len(self.tensors)]
        return {"vol": tensor, "label": index} if self.dicts else tensor


def measure(draws: dict[str, Callable[[], Iterable[Any]]], repeats: int) -> dict[str, list[float]]:
    """Seconds per batch of each pass of each ``draws()``, interleaved so load spikes hit all alike."""
    for draw in draws.values():
        for _ in draw():  # warm up: start the workers, fill the rings
            pass
    times: dict[str, list[float]] = {name: [] for name in draws}
    for _ in range(repeats):
        for name, draw in draws.items():
            start = time.perf_counter()
            count = sum(1 for _ in draw())
            times[name].append((time.perf_counter() - start) / count)
    return times


def direct(
    collate: Callable[[list[Any]], Any], items: list[Any], batches: int
) -> Callable[[], Iterable[Any]]:
    def draw() -> Iterable[Any]:
        for _ in range(batches):
            yield collate(items)

    return draw


def epochs(loader: DataLoader[Any]) -> Callable[[], Iterable[Any]]:
    return lambda: loader


BASELINE = "default_collate (allocating)"


def report(title: str, times: dict[str, list[float]], batch_bytes: int) -> None:
    print(f"\n{title}")
    print(f"  {'collate':<34} {'GB/s':>8} {'best':>8} {'x alloc':>8}")
    base = statistics.median(times[BASELINE])
    for name, runs in times.items():
        median, best = statistics.median(runs), min(runs)
        gbps, best_gbps = batch_bytes / median / 1e9, batch_bytes / best / 1e9
        print(f"  {name:<34} {gbps:8.2f} {best_gbps:8.2f} {base / median:8.2f}")


def in_process(args: argparse.Namespace) -> None:
    batch_bytes = args.batch_size * MIB_FLOATS * 4
    for dicts in (True, False):
        pool = Pool(args.batch_size, args.batch_size, dicts)
        items = [pool[i] for i in range(args.batch_size)]
        collates: dict[str, Callable[[list[Any]], Any]] = {BASELINE: default_collate}
        if dicts:
            collates["DictCollate (allocating)"] = DictCollate()
        else:
            collates["torch.stack (allocating)"] = torch.stack
        collates[f"RingCollate(ring_size={args.ring_size})"] = RingCollate(args.ring_size)
        draws = {name: direct(collate, items, args.batches) for name, collate in collates.items()}
        kind = "dict items" if dicts else "plain tensor items"
        title = f"collate called in-process: {args.batch_size} x 1 MiB float32, {kind}"
        report(title, measure(draws, args.repeats), batch_bytes)


def through_loader(args: argparse.Namespace) -> None:
    batch_bytes = args.batch_size * MIB_FLOATS * 4
    dataset = Pool(args.batch_size * args.batches, 2 * args.batch_size, dicts=True)
    for workers in (0, args.workers):
        collates: dict[str, Callable[[list[Any]], Any]] = {
            BASELINE: default_collate,
            f"RingCollate(ring_size={args.ring_size})": RingCollate(args.ring_size),
        }
        options: dict[str, Any] = {"num_workers": workers}
        if workers:
            options.update(persistent_workers=True, prefetch_factor=2)
        draws = {
            name: epochs(DataLoader(dataset, batch_size=args.batch_size, collate_fn=collate, **options))
            for name, collate in collates.items()
        }
        where = "in the main process" if workers == 0 else f"{workers} worker processes, prefetch_factor 2"
        report(
            f"DataLoader, dict items, {where} (the consumer only draws)",
            measure(draws, args.repeats),
            batch_bytes,
        )
        del draws  # persistent workers end with their loaders


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch-size", type=int, default=32, help="items of 1 MiB per batch")
    parser.add_argument("--batches", type=int, default=40, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per row, interleaved")
    parser.add_argument("--ring-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="worker processes in part 2")
    parser.add_argument("--quick", action="store_true", help="a few batches, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.repeats = 8, 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    in_process(args)
    through_loader(args)


if __name__ == "__main__":
    main()
