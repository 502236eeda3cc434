"""ThreadBuffer: hand-off cost per item and producer/consumer overlap, against a plain loop and a
minimal ``queue.Queue`` thread (plus MONAI's ThreadBuffer and torchdata's Prefetcher if installed).

    python benchmarks/bench_thread_buffer.py            # N=300 overlap batches, 20000 hand-off items
    python benchmarks/bench_thread_buffer.py --quick    # a smoke run

Overlap efficiency is ``N * max(p, c) / wall`` with producer and consumer each sleeping 2 ms per
batch: 1.0 is perfect overlap, 0.5 no overlap at all. Figures are medians over ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from loaderfactory import ThreadBuffer

Stage = Callable[[Iterable[Any], int], Iterable[Any]]


def plain(src: Iterable[Any], buffer_size: int) -> Iterable[Any]:
    return src


def minimal_queue_thread(src: Iterable[Any], buffer_size: int) -> Iterator[Any]:
    """The textbook version: a thread, a bounded queue.Queue, a sentinel."""
    q: queue.Queue[Any] = queue.Queue(buffer_size)
    end = object()

    def produce() -> None:
        for item in src:
            q.put(item)
        q.put(end)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    while (item := q.get()) is not end:
        yield item
    thread.join()


def thread_buffer(src: Iterable[Any], buffer_size: int) -> Iterable[Any]:
    return ThreadBuffer(src, buffer_size=buffer_size)


def optional_stages() -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    try:
        from monai.data import ThreadBuffer as MonaiThreadBuffer

        stages["monai ThreadBuffer"] = lambda src, size: MonaiThreadBuffer(src, buffer_size=size)
    except ImportError:
        pass
    try:
        from torchdata.nodes import IterableWrapper, Loader, Prefetcher

        stages["torchdata Prefetcher"] = lambda src, size: Loader(
            Prefetcher(IterableWrapper(src), prefetch_factor=size)
        )
    except ImportError:
        pass
    return stages


def handoff_us(stage: Stage, n: int, buffer_size: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        items = list(range(n))
        start = time.perf_counter()
        for _ in stage(items, buffer_size):
            pass
        times.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(times)


def sleeping_source(n: int, seconds: float) -> Iterator[int]:
    for i in range(n):
        time.sleep(seconds)
        yield i


def overlap(stage: Stage, n: int, buffer_size: int, step_s: float, repeats: int) -> float:
    effs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in stage(sleeping_source(n, step_s), buffer_size):
            time.sleep(step_s)
        effs.append(n * step_s / (time.perf_counter() - start))
    return statistics.median(effs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=20000, help="items per hand-off run")
    parser.add_argument("--batches", type=int, default=300, help="batches per overlap run (N)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.items, args.batches, args.repeats = 2000, 30, 1

    stages: dict[str, Stage] = {
        "plain loop": plain,
        "minimal queue.Queue thread": minimal_queue_thread,
        "loaderfactory ThreadBuffer": thread_buffer,
        **optional_stages(),
    }
    sizes = (1, 4, 16)
    print(f"hand-off cost, µs per item (median of {args.repeats} runs of {args.items} items)")
    print(f"{'stage':<30}" + "".join(f"{'buffer ' + str(s):>12}" for s in sizes))
    for name, stage in stages.items():
        row = [handoff_us(stage, args.items, s, args.repeats) for s in sizes]
        print(f"{name:<30}" + "".join(f"{v:>12.2f}" for v in row))

    print(f"\noverlap efficiency N·max(p,c)/wall, p = c = 2 ms, N = {args.batches}, buffer 4")
    for name, stage in stages.items():
        if name == "plain loop":
            eff = overlap(stage, args.batches, 4, 0.002, 1)
        else:
            eff = overlap(stage, args.batches, 4, 0.002, args.repeats)
        print(f"{name:<30}{eff:>12.3f}")


if __name__ == "__main__":
    main()
