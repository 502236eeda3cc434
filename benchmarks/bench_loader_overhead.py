"""What the ``Loader`` costs per batch over the bare components it is built from, in one run.

    python benchmarks/bench_loader_overhead.py [--batches 20000] [--repeats 5] [--items 64]

``--items`` sets how many distinct cheap items the dataset holds: 64 (the default) restarts a pass
every 64 batches, so the start of a pass (a thread, torch's iterator) weighs in; 20000 runs one long
pass, so what each batch costs shows alone.

Rows (µs per batch, median of the repeats, cheapest items so the bookkeeping shows):
  bare DataLoader                 torch's DataLoader, batch_size 1, no workers
  bare ThreadBuffer/DataLoader    ThreadBuffer(DataLoader, buffer_size 4)
  bare ThreadBuffer/Resumable     ThreadBuffer(ResumableDataLoader, buffer_size 4): the Loader's
                                  own two components, bare (the baseline of the goal)
  Loader torch+prefetch           build_loader(torch bs=1 + prefetch thread 4): the same components
                                  plus the Loader's bookkeeping (upstream snapshots, stats)
  Loader, state_dict() taken      the same, with a state_dict() call every 100 batches
Ratios are against both bare ThreadBuffers, each the median of the ratios within one round of the
rows (the rows alternate, so a busy neighbour slows a round's rows alike and its ratio stays); the
goal is <= 1.15 over the Loader's own components.
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
from loaderfactory.components.torch_loader import ResumableDataLoader


class Items(torch.utils.data.Dataset[torch.Tensor]):
    """``count`` cheap items, so the per-batch bookkeeping is what the rows differ by."""

    def __init__(self, count: int) -> None:
        self.items = [torch.tensor(i) for i in range(count)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.items[index]


def per_batch_us(make: Callable[[], Iterable[Any]], batches: int, save_every: int = 0) -> float:
    source = make()
    drawn = 0
    started = time.perf_counter()
    while drawn < batches:
        for _ in source:
            drawn += 1
            if save_every and drawn % save_every == 0:
                source.state_dict()  # type: ignore[attr-defined]  # a Loader
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
    parser.add_argument("--items", type=int, default=64, help="distinct items in the dataset")
    args = parser.parse_args()
    items = Items(args.items)
    config = {"loader": {"kind": "torch", "batch_size": 1}, "prefetch": {"kind": "thread", "buffer_size": 4}}

    def loader() -> loaderfactory.Loader:
        return loaderfactory.build_loader(config, dataset=items)

    rows: dict[str, tuple[Callable[[], Iterable[Any]], int]] = {
        "bare DataLoader": (lambda: DataLoader(items, batch_size=1), 0),
        "bare ThreadBuffer/DataLoader": (
            lambda: ThreadBuffer(DataLoader(items, batch_size=1), buffer_size=4),
            0,
        ),
        "bare ThreadBuffer/Resumable": (
            lambda: ThreadBuffer(ResumableDataLoader(items, batch_size=1), buffer_size=4),
            0,
        ),
        "Loader torch+prefetch": (loader, 0),
        "Loader, state_dict() taken": (loader, 100),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeats):  # alternate the rows so drift on a shared machine hits all alike
        for name, (make, save_every) in rows.items():
            times[name].append(per_batch_us(make, args.batches, save_every))
    own = times["bare ThreadBuffer/Resumable"]
    plain = times["bare ThreadBuffer/DataLoader"]
    print(f"{'':30} {'µs/batch':>9} {'vs own components':>18} {'vs TB/DataLoader':>17}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:30} {median:9.1f} {_ratio(values, own):17.2f}x {_ratio(values, plain):16.2f}x")


def _ratio(values: list[float], baseline: list[float]) -> float:
    """The median over rounds of ``values`` against the baseline measured in the same round."""
    return statistics.median(v / b for v, b in zip(values, baseline, strict=True))


if __name__ == "__main__":
    main()
