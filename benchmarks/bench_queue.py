"""Queue vs DataLoader on slow storage: 64 items of 1×64³ float16, 20 ms to load, 5 ms per step.

    python benchmarks/bench_queue.py            # every row, each in a fresh subprocess
    python benchmarks/bench_queue.py --steps 400 --budget 16MB
    python benchmarks/bench_queue.py --workers-type both --repeats 5   # medians, rows alternating

Rows: ``QueueDataset`` (mode always, 2 workers, batch 4) with thread and/or process workers
(``--workers-type``) vs ``torch.utils.data.DataLoader(num_workers=2, shuffle=True)`` on the same
dataset, plus MONAI's ``SmartCacheDataset`` when ``monai`` is importable. Each row runs in its own
process so its peak RSS is its own; steps/s counts from just before the loader is built (so every
cache or queue fill counts, MONAI's included) and, after the first batch, in steady state. With
``--repeats`` the rows alternate and each figure is the median. With both worker types a line gives
process/thread (the goal: steps/s within 0.9×). The last line draws 5,000 batches in mode
onsample (loading delay 0: uniformity does not depend on speed) and prints the max/min ratio of
draws per item.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ITEMS, SHAPE, LOAD_MS, STEP_MS, BATCH = 64, [1, 64, 64, 64], 20.0, 5.0, 4


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dataset(delay_ms: float = LOAD_MS) -> Any:
    from loaderfactory.components.data.datasets import SyntheticDataset

    return SyntheticDataset(ITEMS, {"vol": {"shape": SHAPE, "dtype": "float16"}}, seed=0, delay_ms=delay_ms)


def timed(batches: Any, steps: int, start: float) -> dict[str, float]:
    """Steps/s from ``start`` (taken before the loader was built, so any fill it does counts)."""
    first = None
    done = 0
    while done < steps:
        for _ in batches:
            if first is None:
                first = time.perf_counter()
            time.sleep(STEP_MS / 1000)
            done += 1
            if done == steps:
                break
    end = time.perf_counter()
    assert first is not None
    return {
        "steps_per_s": steps / (end - start),
        "steady_steps_per_s": (steps - 1) / (end - first),
        "first_batch_s": first - start,
    }


def run_row(name: str, steps: int, budget: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    base = peak_rss_mb()
    ds = dataset()
    extra: dict[str, Any] = {}
    if name.startswith("queue"):
        from loaderfactory.components.queue.dataset import QueueDataset
        from loaderfactory.config.specs.queue import QueueDatasetSpec

        size = QueueDatasetSpec.model_validate({"ram_budget": budget}).ram_budget  # "16MB" → bytes
        start = time.perf_counter()
        with QueueDataset(
            ds,
            epoch_size=10**9,
            mode="always",
            num_workers=2,
            worker_type="process" if name == "queue process" else "thread",
            batch_size=BATCH,
            ram_budget=size,
            seed=0,
        ) as queue:
            result = timed(queue, steps, start)
            telemetry = queue.telemetry()
        extra = {"budget_mb": telemetry["budget_mb"], "peak_held_mb": telemetry["peak_held_mb"]}
    elif name == "dataloader":
        from torch.utils.data import DataLoader

        start = time.perf_counter()
        loader = DataLoader(ds, batch_size=BATCH, num_workers=2, shuffle=True, persistent_workers=True)
        result = timed(loader, steps, start)
        del loader
    elif name == "monai_smartcache":
        from monai.data import DataLoader as MonaiLoader
        from monai.data import SmartCacheDataset
        from monai.transforms import Transform

        class Load(Transform):  # a MONAI Transform, so SmartCache caches its output
            def __call__(self, index: int) -> Any:
                return ds[index]

        start = time.perf_counter()  # SmartCache fills its cache while it is constructed
        cache = SmartCacheDataset(
            list(range(ITEMS)),
            transform=Load(),
            replace_rate=0.25,
            cache_num=ITEMS // 2,
            num_init_workers=2,
            num_replace_workers=2,
            progress=False,
        )
        loader = MonaiLoader(cache, batch_size=BATCH, shuffle=True, num_workers=0)
        cache.start()
        try:
            done, first = 0, None
            while done < steps:
                for _ in loader:
                    first = first or time.perf_counter()
                    time.sleep(STEP_MS / 1000)
                    done += 1
                    if done == steps:
                        break
                cache.update_cache()
            end = time.perf_counter()
            result = {
                "steps_per_s": steps / (end - start),
                "steady_steps_per_s": (steps - 1) / (end - first),
                "first_batch_s": first - start,
            }
        finally:
            cache.shutdown()
        extra = {"budget_mb": round(ITEMS // 2 * 2 * 64**3 / 1e6, 3)}
    else:
        raise SystemExit(f"unknown row {name}")
    return {
        "row": name,
        **result,
        "peak_rss_mb": peak_rss_mb(),
        "rss_growth_mb": peak_rss_mb() - base,
        **extra,
    }


def measure_row(row: str, steps: int, budget: str) -> dict[str, Any]:
    """One run of ``row`` in a fresh subprocess."""
    out = subprocess.run(
        [sys.executable, __file__, "--row", row, "--steps", str(steps), "--budget", budget],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def median_row(row: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure of ``row``'s runs as its median."""
    figures = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "row"}
    return {"row": row, **figures}


def sampling_ratio(draws: int) -> dict[str, Any]:
    from loaderfactory.components.queue.dataset import QueueDataset

    with QueueDataset(
        dataset(delay_ms=0.0),
        epoch_size=draws,
        mode="onsample",
        num_workers=1,
        batch_size=BATCH,
        capacity=ITEMS // 2,
        seed=0,
    ) as queue:
        for _ in queue:
            pass
        counts = queue.sampling_counts
    return {
        "draws": draws,
        "max": int(counts.max()),
        "min": int(counts.min()),
        "ratio": float(counts.max() / max(1, counts.min())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--budget", default="16MB", help="queue RAM budget (the dataset is 33.6 MB)")
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument(
        "--workers-type", choices=["thread", "process", "both"], default="both", help="the queue's workers"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per row, alternating; medians shown")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(args.row, args.steps, args.budget)))
        return
    kinds = ["thread", "process"] if args.workers_type == "both" else [args.workers_type]
    rows = ["dataloader", *(f"queue {kind}" for kind in kinds)]
    try:
        import monai  # noqa: F401

        rows.insert(1, "monai_smartcache")
    except ImportError:
        print("(monai not importable: no SmartCacheDataset row)")
    runs: dict[str, list[dict[str, Any]]] = {row: [] for row in rows}
    for _ in range(args.repeats):
        for row in rows:
            runs[row].append(measure_row(row, args.steps, args.budget))
    results = [median_row(row, runs[row]) for row in rows]
    base = results[0]["steps_per_s"]
    print(
        f"{ITEMS} items of 1×64³ float16, {LOAD_MS:.0f} ms load, {STEP_MS:.0f} ms step, batch {BATCH}, "
        f"{args.steps} steps, median of {args.repeats} run(s); step-bound ideal {1000 / STEP_MS:.0f} steps/s"
    )
    header = (
        f"{'loader':<18}{'steps/s':>9}{'steady':>9}{'vs DL':>7}{'1st batch s':>13}"
        f"{'peak RSS MB':>13}{'RSS +MB':>9}{'budget MB':>11}{'held MB':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['row']:<18}{r['steps_per_s']:>9.1f}{r['steady_steps_per_s']:>9.1f}"
            f"{r['steps_per_s'] / base:>6.1f}×"
            f"{r['first_batch_s']:>13.2f}{r['peak_rss_mb']:>13.0f}{r['rss_growth_mb']:>9.0f}"
            f"{r.get('budget_mb', float('nan')):>11.1f}{r.get('peak_held_mb', float('nan')):>9.1f}"
        )
    if len(kinds) == 2:
        thread, process = (r for r in results if r["row"] in ("queue thread", "queue process"))
        print(
            f"\nqueue process/thread: steps/s {process['steps_per_s'] / thread['steps_per_s']:.2f}× "
            f"(goal ≥ 0.9×), steady {process['steady_steps_per_s'] / thread['steady_steps_per_s']:.2f}×, "
            f"1st batch {process['first_batch_s'] / thread['first_batch_s']:.2f}×"
        )
    ratio = sampling_ratio(args.draws)
    print(
        f"\nonsample, capacity {ITEMS // 2}, batch {BATCH}: after {ratio['draws']} draws each item drawn "
        f"{ratio['min']}..{ratio['max']} times, max/min = {ratio['ratio']:.2f}"
    )


if __name__ == "__main__":
    main()
