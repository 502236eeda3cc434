"""How evenly the queue draws its items: balanced (least drawn first) vs uniform draws, one run.

    python benchmarks/bench_queue_balance.py                  # 5 seeds, thread and process workers
    python benchmarks/bench_queue_balance.py --step-ms 2 --workers thread --plots /tmp/balance
    python benchmarks/bench_queue_balance.py --batch-size 4   # 4 items per draw

The setting of the issue: 64 items of 1×64³ float16 taking 20 ms each to load, ``QueueDataset``
in mode ``always`` with 2 workers, capacity 32, batch size 1, 800 draws with a 5 ms training step
after each (so draws come about twice as fast as loads). For each seed and worker type both
policies run back to back: ``balanced`` is the queue as it is; ``uniform`` swaps in the policy
before it (each draw picks held items uniformly at random) by replacing the queue's
:class:`~loaderfactory.components.queue.draws.LeastDrawn` with a subclass. Prints, as medians over
the seeds, the coefficient of variation (std/mean) of the draws per item, their max/min, steps/s
from construction (the fill included) and the time the consumer spends inside ``draw()``, then
the ratios balanced/uniform. i.i.d. uniform draws give a CV of about sqrt(63/800) = 0.28 here.

``--batch-size`` draws that many items per draw. With draws outpacing loads the CV falls as the
passes loaded during the run grow (an item held in fewer passes stays behind), not with the batch
size itself: 200 draws of 4 items see a quarter of the loads of 800 draws of 1 (CV about 0.1 with
threads), while 200 draws of 4 with a 20 ms step give the CV of 800 draws of 1 with a 5 ms step.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402 - after the path setup, like the package imports below

from loaderfactory.components.queue import dataset as queue_module  # noqa: E402
from loaderfactory.components.queue.draws import LeastDrawn  # noqa: E402
from loaderfactory.components.queue.store import Entry  # noqa: E402

ITEMS, SHAPE, LOAD_MS, CAPACITY, WORKERS = 64, [1, 64, 64, 64], 20.0, 32, 2


class UniformDraws(LeastDrawn):
    """The draw policy before balancing: ``k`` held items uniformly at random (without replacement
    while the queue holds ``k``), as ``random.Random.sample`` over the held items did."""

    def take(self, k: int, held: int) -> list[Entry]:
        # Every held entry exactly once (an evicted one's box is emptied; see draws.Box).
        entries = [entry for *_, (entry,) in self._heap if entry is not None]
        drawn = self._rng.sample(entries, k) if held >= k else self._rng.choices(entries, k=k)
        for entry in drawn:
            self.counts[entry.index] += 1
        return drawn


POLICIES: dict[str, type[LeastDrawn]] = {"balanced": LeastDrawn, "uniform": UniformDraws}


def measure(
    policy: str,
    worker_type: str,
    seed: int,
    draws: int,
    step_ms: float,
    plots: Path | None,
    batch_size: int = 1,
) -> dict[str, Any]:
    from loaderfactory.components.data.datasets import SyntheticDataset

    queue_module.LeastDrawn = POLICIES[policy]  # type: ignore[misc]  # the benchmark's policy switch
    try:
        dataset = SyntheticDataset(
            ITEMS, {"vol": {"shape": SHAPE, "dtype": "float16"}}, seed=0, delay_ms=LOAD_MS
        )
        in_draw = 0.0
        start = time.perf_counter()
        with queue_module.QueueDataset(
            dataset,
            epoch_size=draws,
            mode="always",
            num_workers=WORKERS,
            worker_type=worker_type,  # type: ignore[arg-type]  # "thread" or "process" from argparse
            capacity=CAPACITY,
            batch_size=batch_size,
            seed=seed,
        ) as queue:
            queue.start()  # the fill, counted in steps/s but not in the time spent drawing
            for _ in range(draws):
                before = time.perf_counter()
                queue.draw()
                in_draw += time.perf_counter() - before
                time.sleep(step_ms / 1000)
            elapsed = time.perf_counter() - start
            counts = queue.sampling_counts
            loads = queue.telemetry()["loads"]
            if plots is not None:
                plot_draws(counts, plots / f"draws_per_item_{policy}_{worker_type}_{seed}.png")
    finally:
        queue_module.LeastDrawn = LeastDrawn  # type: ignore[misc]
    return {
        "cv": float(counts.std() / counts.mean()),
        "max_min": float(counts.max() / counts.min()) if counts.min() else float("inf"),
        "steps_per_s": draws / elapsed,
        "draw_us": in_draw / draws * 1e6,
        "loads": loads,
    }


def plot_draws(counts: np.ndarray[Any, np.dtype[np.int64]], path: Path) -> None:
    """A histogram of draws per item, one bar per count, as a PNG."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    low, high = int(counts.min()), int(counts.max())
    ax.hist(counts, bins=np.arange(low, high + 2) - 0.5, color="#4477aa")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ratio = f"max/min {high / low:.2f}" if low else "some never drawn"
    ax.set_title(f"draws per item ({ratio})")
    ax.set_xlabel("times drawn")
    ax.set_ylabel("items")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def iid_cv(draws: int, seeds: int) -> float:
    """The CV of ``draws`` i.i.d. uniform draws from ``ITEMS`` items, median over many trials."""
    rng = np.random.default_rng(0)
    counts = rng.multinomial(draws, [1 / ITEMS] * ITEMS, size=max(1000, seeds))
    return float(np.median(counts.std(axis=1) / counts.mean(axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--draws", type=int, default=800)
    parser.add_argument("--step-ms", type=float, default=5.0, help="training step after each draw")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1, help="items per draw")
    parser.add_argument("--workers", nargs="+", default=["thread", "process"], choices=["thread", "process"])
    parser.add_argument("--plots", type=Path, help="write each run's draws-per-item histogram here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    iid = iid_cv(args.draws * args.batch_size, args.seeds)
    print(
        f"{ITEMS} items of 1×64³ float16, {LOAD_MS:.0f} ms load, mode always, {WORKERS} workers, "
        f"capacity {CAPACITY}, batch {args.batch_size}, {args.draws} draws, {args.step_ms:g} ms step; "
        f"medians of {args.seeds} seeds; i.i.d. uniform draws: CV {iid:.3f}"
    )
    header = (
        f"{'workers':<9}{'policy':<10}{'CV':>7}{'CV range':>14}{'max/min':>9}"
        f"{'steps/s':>9}{'draw µs':>9}{'loads':>7}"
    )
    print(header)
    print("-" * len(header))
    for worker_type in args.workers:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in POLICIES}
        for seed in range(args.seeds):
            order = list(POLICIES)
            random.Random(seed).shuffle(order)  # neither policy always runs first on a warm machine
            for name in order:
                runs[name].append(
                    measure(name, worker_type, seed, args.draws, args.step_ms, args.plots, args.batch_size)
                )
        medians = {
            name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
            for name, rows in runs.items()
        }
        for name, m in medians.items():
            cvs = [r["cv"] for r in runs[name]]
            print(
                f"{worker_type:<9}{name:<10}{m['cv']:>7.3f}{f'{min(cvs):.3f}–{max(cvs):.3f}':>14}"
                f"{m['max_min']:>9.2f}{m['steps_per_s']:>9.1f}{m['draw_us']:>9.1f}{m['loads']:>7.0f}"
            )
        new, old = medians["balanced"], medians["uniform"]
        spread = new["max_min"] / old["max_min"] if np.isfinite(old["max_min"] + new["max_min"]) else None
        print(
            f"{worker_type:<9}{'bal/unif':<10}{new['cv'] / old['cv']:>6.2f}×{'':>14}"
            f"{'n/a' if spread is None else f'{spread:.2f}×':>9}"  # some item never drawn
            f"{new['steps_per_s'] / old['steps_per_s']:>8.2f}×{new['draw_us'] / old['draw_us']:>8.2f}×"
        )


if __name__ == "__main__":
    main()
