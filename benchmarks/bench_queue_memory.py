"""Memory of the queue's worker processes vs its worker threads, on the same work, in one run.

    python benchmarks/bench_queue_memory.py                # thread and process, one run each
    python benchmarks/bench_queue_memory.py --repeats 3    # median of 3, alternating

The workload of the rows ``queue thread`` and ``queue process`` of ``compare_revisions.py``: a
``QueueDataset`` of 64 items of 1×64³ float16 (0.5 MiB) taking 20 ms each to load, 2 workers, mode
``always``, 16 MB budget, batch 4, 5 ms per step, 300 steps. Each row runs in a fresh subprocess and
reports steps/s (less the time spent measuring memory) and the growth of the process tree's
proportional set size (PSS, sampled every 50 steps, the peak kept), and where it is at that peak:
the parent's PSS growth (it falls as ``fork`` shares the parent's pages with the workers), the items
the parent holds in shared memory (``Pss_Shmem`` of ``/proc/<pid>/smaps_rollup``), the workers' PSS
(ΔPSS = Δparent PSS + workers PSS) and their private memory (USS: what they touched since ``fork``
or allocated themselves). The last line is the ratio process/thread (the goal: ΔPSS within 1.2×).
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STEPS, SAMPLE_EVERY = 300, 50
MIB = 2**20


def shmem_mb(pid: int) -> float:
    """The shared-memory pages (the items handed over by worker processes) in a process's PSS."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss_Shmem:"):
                return int(line.split()[1]) / 1024
    return 0.0


def tree() -> dict[str, float]:
    """The process tree's PSS, and how it splits between the parent and its workers."""
    import psutil

    me = psutil.Process()
    sizes = {"pss": 0.0, "parent pss": 0.0, "parent shmem": 0.0, "workers pss": 0.0, "workers uss": 0.0}
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a worker may exit while we look
            memory = process.memory_full_info()
            sizes["pss"] += memory.pss / MIB
            if process.pid == me.pid:
                sizes["parent pss"] = memory.pss / MIB
                sizes["parent shmem"] = shmem_mb(process.pid)
            else:
                sizes["workers pss"] += memory.pss / MIB
                sizes["workers uss"] += memory.uss / MIB
    return sizes


def measure(worker_type: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    from compare_revisions import slow_queue

    before = tree()
    peak = before
    sampling = 0.0  # reading smaps takes about 80 ms with two worker processes, 20 without
    start = time.perf_counter()
    with slow_queue(worker_type, STEPS) as queue:
        for step, _ in enumerate(queue):
            time.sleep(0.005)
            if step % SAMPLE_EVERY == 0:
                sampled = time.perf_counter()
                now = tree()
                sampling += time.perf_counter() - sampled
                if now["pss"] > peak["pss"]:
                    peak = now
    elapsed = time.perf_counter() - start - sampling
    return {
        "steps/s": STEPS / elapsed,
        "ΔPSS MiB": peak["pss"] - before["pss"],
        "Δparent PSS": peak["parent pss"] - before["parent pss"],
        "parent shmem": peak["parent shmem"],
        "workers PSS": peak["workers pss"],
        "workers USS": peak["workers uss"],
    }


def run_row(worker_type: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--row", worker_type],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per row; the median is printed")
    parser.add_argument("--row", choices=["thread", "process"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(args.row)))
        return
    runs: dict[str, list[dict[str, float]]] = {"thread": [], "process": []}
    for _ in range(args.repeats):
        for worker_type, results in runs.items():
            results.append(run_row(worker_type))
    medians: dict[str, dict[str, Any]] = {
        worker_type: {metric: statistics.median(r[metric] for r in results) for metric in results[0]}
        for worker_type, results in runs.items()
    }
    metrics = list(medians["thread"])
    print(f"median of {args.repeats} run(s) per row, MiB where not steps/s\n")
    print(f"{'workers':<10}" + "".join(f"{metric:>14}" for metric in metrics))
    for worker_type, row in medians.items():
        print(f"{worker_type:<10}" + "".join(f"{row[metric]:>14.1f}" for metric in metrics))
    thread, process = medians["thread"], medians["process"]
    print(
        f"\nprocess/thread: ΔPSS {process['ΔPSS MiB'] / thread['ΔPSS MiB']:.2f}× (goal ≤ 1.2×), "
        f"steps/s {process['steps/s'] / thread['steps/s']:.2f}×"
    )


if __name__ == "__main__":
    main()
