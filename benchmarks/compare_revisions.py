"""The queue and the sharded loader of two checkouts, measured side by side in one run.

    git worktree add /tmp/lf_before <rev>
    python benchmarks/compare_revisions.py --before /tmp/lf_before [--repeats 3]

Each measurement runs in a fresh subprocess whose ``loaderfactory`` is imported from one checkout
(``PYTHONPATH``); the two checkouts alternate, so a noisy neighbour hurts both alike. Prints the
median of ``--repeats`` runs per row and the ratio after/before (> 1: after is faster). Workloads:

- queue: 64 items of 1×64³ float16 taking 20 ms each to load, 2 workers (thread or process),
  mode ``always``, batch 4, 16 MB budget, 5 ms per step, 300 steps: steps/s from construction
  (less the time spent measuring memory), and the growth of the process tree's proportional set
  size (PSS) while it runs.
- sharded: 1,280 items of about 2 ms numpy work each, batch 32, with 0 or 2 workers: items/s of
  one epoch; and 1 MiB tensors through 2 process workers: MB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent

ROWS = [
    "queue thread",
    "queue process",
    "sharded 0",
    "sharded 2 process",
    "sharded 2 thread",
    "sharded transport",
]


# -- the measured side (runs inside one checkout) ----------------------------------------------------
class SlowVolumes:
    def __init__(self, length: int = 64, delay_s: float = 0.02) -> None:
        self.length, self.delay_s = length, delay_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        time.sleep(self.delay_s)
        generator = torch.Generator().manual_seed(index)
        return {"vol": torch.randn((1, 64, 64, 64), generator=generator).half(), "index": index}


def first(items: list[Any]) -> Any:
    return items[0]


def slow_queue(worker_type: str, steps: int = 300) -> Any:
    """The queue workload: SlowVolumes, mode always, 2 workers, 16 MB budget, batch 4, ``steps`` per epoch."""
    from loaderfactory import QueueDataset

    return QueueDataset(
        SlowVolumes(),
        epoch_size=steps,
        mode="always",
        num_workers=2,
        worker_type=worker_type,
        ram_budget=16_000_000,
        batch_size=4,
        seed=0,
    )


def tree_pss_mb() -> float:
    import psutil

    me = psutil.Process()
    total = 0
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a worker may exit while we look
            total += process.memory_full_info().pss
    return total / 2**20


def measure(row: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    import loaderfactory
    from loaderfactory import ShardedDataLoader

    assert Path(loaderfactory.__file__).is_relative_to(Path.cwd()), "PYTHONPATH did not pick the checkout"
    from bench_sharded import CpuBound, Megabyte  # after loaderfactory: it must come from the checkout

    if row.startswith("queue"):
        worker_type = row.split()[1]
        before = tree_pss_mb()
        peak = before
        sampling = 0.0  # reading smaps takes about 80 ms with two worker processes, 20 without
        start = time.perf_counter()
        with slow_queue(worker_type) as queue:
            for step, _ in enumerate(queue):
                time.sleep(0.005)
                if step % 50 == 0:
                    sampled = time.perf_counter()
                    peak = max(peak, tree_pss_mb())
                    sampling += time.perf_counter() - sampled
        elapsed = time.perf_counter() - start - sampling
        return {"steps/s": 300 / elapsed, "ΔPSS MB": peak - before}
    if row == "sharded transport":
        with ShardedDataLoader(Megabyte(256), batch_size=1, collate=first, num_workers=2) as loader:
            start = time.perf_counter()
            total = sum(batch.nbytes for batch in loader)
            return {"MB/s": total / 2**20 / (time.perf_counter() - start)}
    parts = row.split()
    workers = int(parts[1])
    worker_type = parts[2] if len(parts) > 2 else "process"
    dataset = CpuBound(1280, int(os.environ.get("LF_REPS", "20")))
    with ShardedDataLoader(dataset, batch_size=32, num_workers=workers, worker_type=worker_type) as loader:
        start = time.perf_counter()
        count = sum(len(batch["y"]) for batch in loader)
        return {"items/s": count / (time.perf_counter() - start)}


# -- the driver ------------------------------------------------------------------------------------------
def run_in(tree: Path, row: str, reps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "LF_REPS": str(reps)}
    out = subprocess.run(
        [sys.executable, __file__, "--row", row],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tree,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, help="a checkout of the revision to compare with")
    parser.add_argument("--after", type=Path, default=HERE, help="default: this checkout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", nargs="*", default=ROWS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.row)))
        return
    if args.before is None:
        parser.error("--before is required")
    from bench_sharded import calibrate

    reps = calibrate()
    print(f"before: {args.before}\nafter:  {args.after}\nmedian of {args.repeats} runs each, alternating\n")
    print(f"{'row':<20}{'metric':<10}{'before':>10}{'after':>10}{'after/before':>14}")
    print("-" * 64)
    for row in args.rows:
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            runs["before"].append(run_in(args.before, row, reps))
            runs["after"].append(run_in(args.after, row, reps))
        for metric in runs["before"][0]:
            old = statistics.median(r[metric] for r in runs["before"])
            new = statistics.median(r[metric] for r in runs["after"])
            print(f"{row:<20}{metric:<10}{old:>10.1f}{new:>10.1f}{new / old:>13.2f}×")


if __name__ == "__main__":
    main()
