"""Every performance goal in one run: each figure beside its baseline, as a ratio.

    python benchmarks/bench_goals.py            # about 4 minutes on 2 cores
    python benchmarks/bench_goals.py --quick    # smaller runs, noisier ratios

Runs the benchmark scripts below one after another (each prints its own table, shown in full) and
ends with one line per goal:

  Loader overhead      Loader torch+prefetch vs its bare components      bench_loader_overhead.py
  balanced draws       queue draw-count CV, balanced vs uniform draws    bench_queue_balance.py
  process queue memory ΔPSS with process vs thread workers               bench_queue_memory.py
  reused collate       RingCollate vs allocating default_collate         bench_collate.py
  sharded standalone   ShardedDataLoader alone vs torch's DataLoader     bench_sharded_standalone.py
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Goal:
    name: str
    script: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    pattern: str
    """Regex whose first group is the ratio in the script's output."""
    target: str
    met: str
    """``<=`` or ``>=``: how the ratio must compare with the target."""


GOALS = (
    Goal(
        "Loader overhead (x bare components)",
        "bench_loader_overhead.py",
        ("--batches", "20000", "--repeats", "9"),
        ("--batches", "5000", "--repeats", "3"),
        r"^Loader torch\+prefetch\s+[\d.]+\s+([\d.]+)x",
        "1.15",
        "<=",
    ),
    Goal(
        "balanced draws, CV (x uniform), thread workers",
        "bench_queue_balance.py",
        ("--seeds", "3"),
        ("--seeds", "1", "--draws", "400"),
        r"^thread\s+bal/unif\s+([\d.]+)×",
        "0.54",  # CV 0.15 against uniform draws' 0.28
        "<=",
    ),
    Goal(
        "process queue ΔPSS (x thread workers)",
        "bench_queue_memory.py",
        ("--repeats", "3"),
        (),
        r"ΔPSS ([\d.]+)×",
        "1.2",
        "<=",
    ),
    Goal(
        "reused collate, 32 x 1 MiB (x allocating)",
        "bench_collate.py",
        (),
        ("--quick",),
        r"RingCollate\(ring_size=4\)\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
        "3",
        ">=",
    ),
    Goal(
        "sharded standalone, 2 processes (x DataLoader)",
        "bench_sharded_standalone.py",
        ("--rounds", "3"),
        ("--rounds", "1", "--items", "640"),
        r"^sharded, standalone.*\s([\d.]+)x$",
        "0.9",
        ">=",
    ),
)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    args = parser.parse_args()
    summary = []
    for goal in GOALS:
        command = [sys.executable, str(HERE / goal.script), *(goal.quick if args.quick else goal.args)]
        print(f"\n=== {goal.script} {' '.join(command[2:])}", flush=True)
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, check=False)
        print(done.stdout.rstrip())
        if done.returncode != 0:
            print(done.stderr[-2000:])
        found = re.findall(goal.pattern, done.stdout, flags=re.MULTILINE)
        ratio = float(found[0]) if found else None  # the first row: in-process collate, dict items
        if ratio is None:
            verdict = "no figure"
        else:
            ok = ratio <= float(goal.target) if goal.met == "<=" else ratio >= float(goal.target)
            verdict = "met" if ok else "NOT met"
        summary.append((goal.name, ratio, f"{goal.met} {goal.target}", verdict))
    print("\n=== goals")
    width = max(len(name) for name, *_ in summary)
    for name, ratio, target, verdict in summary:
        shown = f"{ratio:.2f}x" if ratio is not None else "-"
        print(f"{name:<{width}}  {shown:>7}  goal {target:<7} {verdict}")


if __name__ == "__main__":
    main()
