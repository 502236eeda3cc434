"""StreamWrapper: overlap of producer and consumer, consumer wait per batch, and raw throughput.

    python benchmarks/bench_stream.py [--batches 300] [--repeats 3]

Overlap efficiency is N·max(p, c) / wall for N batches with a producer and a consumer of 2 ms each
(both sleep, releasing the GIL like I/O or native code): 1.0 is perfect overlap, 0.5 none. The
baseline is the smallest thread + ``queue.Queue`` prefetcher, measured in the same run. Throughput
uses a zero-cost producer and consumer, against emloop's ceiling of 50 batches/s (20 ms sleep per batch).
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator

from loaderfactory.components.stream.wrapper import StreamWrapper

STEP_S = 0.002
SEED_CEILING = 50.0


def _slow_source(n: int, cost: float) -> Callable[[], Iterator[int]]:
    def make() -> Iterator[int]:
        for i in range(n):
            if cost:
                time.sleep(cost)
            yield i

    return make


def _queue_thread(make: Callable[[], Iterator[int]], size: int) -> Iterator[int]:
    """The minimal prefetcher: one thread, one queue.Queue, a sentinel."""
    q: queue.Queue[object] = queue.Queue(size)
    end = object()

    def run() -> None:
        for item in make():
            q.put(item)
        q.put(end)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while (item := q.get()) is not end:
        yield item  # type: ignore[misc]
    thread.join()


def _consume(batches: Iterator[int], cost: float) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    for _ in batches:
        if cost:
            time.sleep(cost)
        count += 1
    return time.perf_counter() - start, count


def _stream(
    n: int, cost: float, buffer_size: int, profile: dict[str, list[float]] | None = None
) -> Iterator[int]:
    stream = StreamWrapper(_slow_source(n, cost), buffer_size=buffer_size, name="bench", profile=profile)
    try:
        yield from stream
    finally:
        stream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, ideal = args.batches, args.batches * STEP_S

    rows: list[tuple[str, str, str]] = []
    efficiencies: dict[str, list[float]] = {"queue": [], "stream": [], "unbuffered": []}
    waits: list[float] = []
    for _ in range(args.repeats):
        wall, _count = _consume(_queue_thread(_slow_source(n, STEP_S), 4), STEP_S)
        efficiencies["queue"].append(ideal / wall)
        profile: dict[str, list[float]] = {}
        wall, _count = _consume(_stream(n, STEP_S, 4, profile), STEP_S)
        efficiencies["stream"].append(ideal / wall)
        waits.extend(profile["bench"][1:])  # the first batch always waits for a cold producer
        wall, _count = _consume(_stream(n, STEP_S, 0), STEP_S)
        efficiencies["unbuffered"].append(ideal / wall)

    rows.append(
        (
            "overlap efficiency, queue.Queue thread (baseline)",
            f"{statistics.median(efficiencies['queue']):.3f}",
            "",
        )
    )
    rows.append(
        (
            "overlap efficiency, StreamWrapper buffer_size=4",
            f"{statistics.median(efficiencies['stream']):.3f}",
            "",
        )
    )
    rows.append(
        (
            "overlap efficiency, StreamWrapper unbuffered",
            f"{statistics.median(efficiencies['unbuffered']):.3f}",
            "",
        )
    )
    rows.append(("consumer wait per batch (profile), mean", f"{statistics.fmean(waits) * 1e3:.3f}", "ms"))
    rows.append(("consumer wait per batch (profile), p50", f"{statistics.median(waits) * 1e3:.3f}", "ms"))
    rows.append(
        (
            "consumer wait per batch (profile), p99",
            f"{statistics.quantiles(waits, n=100)[98] * 1e3:.3f}",
            "ms",
        )
    )

    fast = n * 100
    rates: dict[str, list[float]] = {"queue": [], "buffered": [], "unbuffered": []}
    for _ in range(args.repeats):
        wall, count = _consume(_queue_thread(_slow_source(fast, 0.0), 16), 0.0)
        rates["queue"].append(count / wall)
        wall, count = _consume(_stream(fast, 0.0, 16), 0.0)
        rates["buffered"].append(count / wall)
        wall, count = _consume(_stream(fast, 0.0, 0), 0.0)
        rates["unbuffered"].append(count / wall)
    for key, label in (
        ("buffered", "buffer_size=16"),
        ("unbuffered", "unbuffered"),
        ("queue", "queue.Queue thread"),
    ):
        rate = statistics.median(rates[key])
        rows.append(
            (
                f"batches/s, zero-cost producer, {label}",
                f"{rate:,.0f}",
                f"({rate / SEED_CEILING:,.0f}x seed's 50/s)",
            )
        )

    width = max(len(r[0]) for r in rows)
    print(
        f"StreamWrapper benchmark: {n} batches, producer = consumer = {STEP_S * 1e3:g} ms, "
        f"median of {args.repeats}"
    )
    for label, value, unit in rows:
        print(f"{label:<{width}}  {value:>10} {unit}")


if __name__ == "__main__":
    main()
